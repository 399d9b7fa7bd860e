"""git-lanes: run many tasks at once in Git worktrees, land each as one verified commit."""

__version__ = "0.1.0"
