"""Instructions and corrections for a lane (SPEC §6.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import usage
from ..core.ids import check_id, require_utf8

MAX_TEXT = 4000
KINDS = ("instruction", "correction")
SESSION_STATES = ("idle", "working", "blocked", "done")


# what a hint used to leave for the caller to fill in (SPEC §17.1 v4): never sent as a real text
_PLACEHOLDERS = {"…", "...", "…."}


def is_placeholder(text: str) -> bool:
    """True for a text that is blank or only a placeholder (`…`, `...`, `<…>`, `<text>`, any `<...>`)."""
    core = text.strip()
    while len(core) >= 2 and core[0] == core[-1] and core[0] in "'\"`":
        core = core[1:-1].strip()
    if not core or core in _PLACEHOLDERS:
        return True
    return core.startswith("<") and core.endswith(">") and "<" not in core[1:-1] and ">" not in core[1:-1] \
        and "\n" not in core


@dataclass(frozen=True)
class InstructionRequest:
    task_id: str
    kind: str
    text: str
    session_state: str


def parse_instruction(value: Any, names: dict[str, str] | None = None) -> InstructionRequest:
    """Untrusted input (`tick --instruct JSON`), shape-checked; usage error (exit 2) otherwise, naming
    the field as the caller spelled it (`names`: the `instruct` command's options), else `--instruct`'s."""
    def field(name: str) -> str:
        return (names or {}).get(name) or f"invalid --instruct: {name}"

    if not isinstance(value, dict):
        raise usage("invalid --instruct: expected a JSON object")
    unknown = sorted(set(value) - {"task_id", "kind", "text", "session_state"})
    if unknown:
        raise usage(f"invalid --instruct: unknown field {unknown[0]}")
    task_id = value.get("task_id")
    if not isinstance(task_id, str):
        raise usage(f"{field('task_id')}: must be a string")
    check_id(task_id, "task id")
    kind = value.get("kind", "instruction")
    if kind not in KINDS:
        raise usage(f"{field('kind')}: must be instruction or correction")
    text = value.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
        raise usage(f"{field('text')}: must be 1 to {MAX_TEXT} characters, not blank")
    require_utf8(text, field("text"))
    if is_placeholder(text):
        raise usage(f"{field('text')}: {text.strip()!r} is a placeholder, not a message; write the text "
                    "(--file FILE, or --edit on a terminal)")
    state = value.get("session_state")
    if state not in SESSION_STATES:
        raise usage(f"{field('session_state')}: must be idle, working, blocked or done")
    return InstructionRequest(task_id, kind, text, state)


def instruction_refusal(child_state: str | None, has_lane: bool, correction_due: bool,
                        request: InstructionRequest) -> str | None:
    """The refusal text (first wins), or None when the text may go to the lane now."""
    tid = request.task_id
    if child_state is None or not has_lane:
        return f"{tid} has no Lane in this batch"
    if child_state != "enrolled":
        return f"{tid} is {child_state}, not running in its Lane"
    if request.kind == "correction" and not correction_due:
        return f"{tid} has not exhausted its rework budget; send an ordinary instruction instead"
    if request.kind == "instruction" and correction_due:
        return f"{tid} waits for a design-level correction; send it with kind correction"
    if request.session_state == "blocked":
        return f"{tid}'s session is blocked on a dialog only the user may answer; send nothing and tell the user"
    if request.session_state != "idle":
        return f"{tid}'s session is {request.session_state}; text goes only to an idle session"
    return None
