"""The scratch worktree (SPEC §8.3, §10.3): a detached worktree under the Git common dir where
integration reruns and final checks run on exactly the tree they judge, never in the coordinator.

It is moved to each candidate with a two-tree checkout (only changed files are touched) and
cleaned of every untracked and ignored file except those matching `lanes.keep`;
`lanes.setupCommand` runs when it is created and whenever a kept path is missing.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from .checks import CheckResult, child_env, run_checks
from .workspace import last_line, run_setup

if TYPE_CHECKING:
    from .model import BatchRecord
    from .session import Session


class Scratch:
    def __init__(self, s: "Session", record: "BatchRecord") -> None:
        self.s = s
        self.git = s.git
        self.record = record
        self.path = os.path.join(s.git.common_dir, "lanes", "scratch", record.batch_id)

    def _keep(self) -> list[str]:
        return self.git.config_all("lanes.keep")

    def _setup(self) -> None:
        result = run_setup(self.s, self.path, slug=self.record.slug, batch_id=self.record.batch_id, task_id="")
        if result is not None and not result.passed:
            self.s.warn(f"lanes.setupCommand failed in the scratch worktree (exit {result.exit_code}): "
                        f"{last_line(result)}")

    def move_to(self, commit: str) -> str:
        """Check the scratch worktree out at `commit`, touching only changed files, then clean it."""
        work = self.git.work
        if self.s.worktree_at(self.path) is None or not os.path.isdir(self.path):
            if os.path.exists(self.path):
                shutil.rmtree(self.path)
            work.prune()
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            work.add(self.path, commit, detach=True)
            self.s.worktrees(refresh=True)
            self._setup()
            return self.path
        work.checkout_detached(self.path, commit)
        work.clean(self.path, self._keep())
        literal = [p.strip().rstrip("/") for p in self._keep() if p.strip() and not any(ch in p for ch in "*?[")]
        if any(not os.path.exists(os.path.join(self.path, p)) for p in literal):
            self._setup()
        return self.path

    def run(self, commit: str, items: list[tuple[str, str, str, float]]) -> list[CheckResult]:
        """Run (task, id, command, timeout) items at `commit`; each result id is `<task>:<id>`."""
        self.move_to(commit)
        results = []
        for task, check_id, command, timeout in items:
            env = child_env(os.environ, self.git.local_env_vars, slug=self.record.slug,
                            batch=self.record.batch_id, task=task)
            r = run_checks([(check_id, command, timeout)], cwd=self.path, env=env)[0]
            results.append(CheckResult(f"{task}:{r.id}" if task else r.id, r.command, r.exit_code, r.signal,
                                       r.passed, r.duration_ms, r.output_tail))
        return results
