"""One tool call as one command (SPEC §17.3, §17.6 MCP): a fresh `Session` on the server's folder (or the
lane), warnings collected, a confirmation asked through the client, a cancellation that acts as Ctrl-C,
and what it returns or refuses as plain data. No SDK here: `server.py` supplies the client's side."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.errors import ExitCode, LanesError, refused, usage


class Client:
    """What the server knows of its client and its own start (`git lanes mcp --allow-yes`)."""

    def __init__(self, name: str, allow_yes: bool, elicit: Callable[[str], bool | None] | None,
                 progress: Callable[[float, str], None] | None) -> None:
        self.name = name
        self.allow_yes = allow_yes
        self.elicit = elicit          # asks the person through the client; None: the client cannot
        self.progress = progress      # a progress notification for this call (None: none asked)


@dataclass
class Call:
    """One tool call: the folders it runs in, what it may ask, what it was told."""
    cwd: str
    lane: str | None
    client: Client
    warnings: list[str] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    confirmed_by: dict[str, str] | None = None
    _thread: int | None = None
    _finished: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def session(self, lane_side: bool = False):
        """A new Session per call: nothing cached between calls (each call is a fresh command)."""
        from ..domain.session import Session

        if lane_side and self.lane is None:
            raise usage("this tool runs in a lane: start the server there, or with --lane PATH")
        return Session(cwd=self.lane if lane_side else self.cwd, warn=self.warnings.append, lane_side=lane_side)

    def confirm_fn(self, yes: bool) -> Callable[[str], Any]:
        """`start`/`resume`/`revise` confirmation (SPEC §17.6): the client's elicitation when it has one;
        else `yes` under `--allow-yes` (recorded as the agent's, `mcp:<client>`); else the refusal
        `batch_confirmation_required` carrying what it would confirm."""
        def confirm(text: str):
            if self.client.elicit is not None:
                answer = self.client.elicit(text)
                if answer:   # a person answered through the client
                    self.confirmed_by = {"actor": "user", "confirmation_ref": f"mcp:{self.client.name}"}
                    return self.confirmed_by
                if answer is not None:
                    return False
            if yes and self.client.allow_yes:
                self.confirmed_by = {"actor": "agent", "confirmation_ref": f"mcp:{self.client.name}"}
                return self.confirmed_by
            if yes:
                why = "yes is honoured only by a server started with 'git lanes mcp --allow-yes'"
            elif self.client.allow_yes:
                why = "show the confirmation to your user; pass yes: true to confirm it"
            else:
                why = "confirm through a client that can ask its user, or pass yes: true to a server started " \
                      "with --allow-yes"
            raise LanesError(f"nothing was confirmed ({why})", exit_code=ExitCode.REFUSED,
                             code="batch_confirmation_required", report={"confirmation": text})
        return confirm

    def progress(self, done: float, message: str) -> None:
        if self.client.progress is not None:
            self.client.progress(done, message)

    # -- running in a worker thread; a cancellation is Ctrl-C -------------------------------------------

    def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` in this thread, interruptible by `interrupt()` (checks watched for progress)."""
        from ..domain.checks import watching

        self._thread = threading.get_ident()
        try:
            with watching(lambda n, r: self.progress(n, f"{r.id}: {'passed' if r.passed else 'failed'}")):
                return fn()
        finally:
            with self._lock:
                self._finished = True

    def interrupt(self) -> None:
        """The client cancelled: Ctrl-C in the call's thread (its process groups are killed as they unwind,
        `done` writes nothing)."""
        self.cancelled.set()
        with self._lock:
            if self._thread is None or self._finished:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), ctypes.py_object(KeyboardInterrupt))


def outcome_doc(result) -> dict[str, Any]:
    """A tick outcome's report; its refusal raised with the report attached (the CLI's exit 1)."""
    if result.error is not None:
        e = result.error
        raise LanesError(e.detail, exit_code=ExitCode(result.exit_code or 1), code=e.code, report=result.report,
                         hint=e.hint)
    return result.report


def refusal(exc: BaseException) -> dict[str, Any]:
    """The structured content of a refused call: `{code, detail, exit_code}` (+ `report`, `hint`, and what
    a confirmation would have confirmed) and its `error:` line."""
    from ..core.redact import redact

    if isinstance(exc, KeyboardInterrupt):
        return {"code": "interrupted", "detail": "the call was cancelled", "exit_code": 130,
                "error": "error: interrupted"}
    if not isinstance(exc, LanesError):
        return {"code": "internal_error", "detail": redact(f"{type(exc).__name__}: {exc}"), "exit_code": 128,
                "error": redact(f"fatal: internal error: {type(exc).__name__}: {exc}")}
    doc: dict[str, Any] = {"code": exc.code, "detail": redact(exc.detail), "exit_code": int(exc.exit_code),
                           "error": f"{'fatal' if exc.exit_code == ExitCode.FATAL else 'error'}: "
                                    + redact(exc.message)}
    if isinstance(exc.report, dict) and "confirmation" in exc.report and len(exc.report) == 1:
        doc["confirmation"] = exc.report["confirmation"]
    elif exc.report is not None:
        doc["report"] = exc.report
    if exc.hint:
        doc["hint"] = exc.hint
    return doc


def qa_refusal(doc: dict[str, Any]) -> LanesError:
    """A failed `done` attempt: the CLI's `error: qa_failed: …` (exit 1) with the attempt as its report."""
    from ..domain.checks import failed_summary

    return refused("qa_failed", failed_summary(doc["results"], doc.get("note")), report=doc)
