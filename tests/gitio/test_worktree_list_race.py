"""`git worktree list` fails now and then while another process adds or removes a worktree ("failed to read
.../commondir"). Found running `git lanes run` on a real project: a session starting while a spare lane was
being added saw no worktree at all ("not in a lane"); a tick seeing that would park every lane as lost.
The gateway retries such a failure, so a listing never comes back without the worktrees that exist."""

from __future__ import annotations

import os
import subprocess
import threading

from git_lanes.gitio import Git


def test_the_worktree_list_never_misses_a_worktree_while_others_come_and_go(repo, tmp_path):
    keep = tmp_path / "keep"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "keep", str(keep)], cwd=repo, check=True)
    done = threading.Event()

    def churn() -> None:
        try:
            for i in range(60):
                path = tmp_path / f"w{i}"
                subprocess.run(["git", "worktree", "add", "-q", "-b", f"b{i}", str(path)], cwd=repo,
                               capture_output=True)
                subprocess.run(["git", "worktree", "remove", str(path)], cwd=repo, capture_output=True)
        finally:
            done.set()

    thread = threading.Thread(target=churn)
    thread.start()
    git = Git(str(keep))
    listings = 0
    while not done.is_set():
        wt = git.worktrees().at(str(keep))
        assert wt is not None and wt.branch == "refs/heads/keep"
        listings += 1
    thread.join()
    assert listings > 20
    assert os.path.isdir(keep)
