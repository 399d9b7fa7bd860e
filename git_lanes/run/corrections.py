"""Corrections for `git lanes run` (SPEC §13): the text from `--corrector CMD` fed the failing checks'
output on stdin, else a default one built from them, sent to an idle lane through a tick."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from ..decisions.instruction import MAX_TEXT, InstructionRequest
from ..domain.procs import run as run_process
from ..tick import Request
from .prompts import default_correction, failing_checks, failure_text
from .provisions import Stop

if TYPE_CHECKING:
    from .progress import Progress
    from .sessions import Sessions

CORRECTOR_TIMEOUT = 600.0


class Correcting:
    """The corrections part of the driver (`Driver` mixes it in)."""

    slug: str
    corrector: list[str] | None
    sessions: "Sessions"
    progress: "Progress"
    report: dict[str, Any]
    interrupted: threading.Event
    tick: Callable[..., dict[str, Any]]

    def correct(self, handoff: dict[str, Any]) -> dict[str, Any]:
        task = handoff["task_id"]
        lrec, _ = self.sessions.lane_session(handoff["lane_path"]).lanes.read(self.slug, task)
        failed = failing_checks(lrec)
        text = self._run_corrector(task, handoff["lane_path"], failed) if self.corrector else None
        if self.interrupted.is_set():   # Ctrl-C while the corrector ran (it was killed): nothing goes out
            return self.report
        text = text or default_correction(task, failed)
        req = InstructionRequest(task_id=task, kind="correction", text=text[:MAX_TEXT], session_state="idle")
        report = self.tick(Request(instruction=req, actor="run"))
        li = report.get("lane_instruction") or {}
        if not li.get("accepted"):
            raise Stop(f"the correction for {task} was refused: {li.get('reason')}")
        self.progress.event(f"{task}: correction sent ({len(text)} characters)")
        return report

    def _run_corrector(self, task: str, cwd: str, failed: list[dict[str, Any]]) -> str | None:
        try:
            done = run_process(self.corrector, cwd=cwd, env=self.sessions.env(task), timeout=CORRECTOR_TIMEOUT,
                               input=failure_text(failed).encode("utf-8", "replace"), separate_stderr=True,
                               tail=1 << 20)
        except OSError as exc:
            self.progress.event(f"{task}: corrector cannot run ({exc}); sending the default correction")
            return None
        if done.timed_out:
            self.progress.event(f"{task}: corrector timed out; sending the default correction")
            return None
        text = done.output.decode("utf-8", "replace").strip()
        if done.exit_code != 0 or not text:
            why = f"exit code {done.exit_code}" if done.exit_code else \
                (f"killed by {done.signal}" if done.signal else "no output")
            last = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            self.progress.event(f"{task}: corrector failed ({why}) {last[0]}".rstrip()
                                + "; sending the default correction")
            return None
        return text[:MAX_TEXT]
