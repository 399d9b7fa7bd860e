"""`git lanes help [<command>]` (SPEC §17.1 v4): the manual as `git help` shows it, when one is installed."""

from __future__ import annotations

import os
import shutil


def open_manual() -> bool:
    """`man git-lanes` on the user's terminal when the man page is installed; False when it is not (or
    `man` is missing), so the caller prints the command's own help instead."""
    if shutil.which("man") is None:
        return False
    from ..gitio.process import attached, spawn

    if spawn(["man", "-w", "git-lanes"], os.getcwd(), os.environ).returncode != 0:
        return False
    return attached(["man", "git-lanes"], os.getcwd(), os.environ) == 0
