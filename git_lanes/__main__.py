"""`python -m git_lanes` runs the CLI."""

from git_lanes.cli import entry

entry()
