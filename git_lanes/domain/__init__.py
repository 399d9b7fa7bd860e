"""Lanes, worktrees, checks and processes: the effects use cases are made of (through gitio and store)."""
