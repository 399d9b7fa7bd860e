"""`git lanes mcp` without the extra `git-lanes[mcp]` (SPEC §17.3): it says how to install it, exit 2."""

from __future__ import annotations

import subprocess
import sys

HIDDEN = ("import sys; sys.modules['mcp'] = None; from git_lanes.cli import entry; "
          "sys.argv = ['git-lanes', 'mcp']; entry()")


def test_without_the_sdk_it_says_how_to_install_it(repo):
    proc = subprocess.run([sys.executable, "-c", HIDDEN], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "pip install 'git-lanes[mcp]'" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
