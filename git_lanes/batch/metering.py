"""Usage of executor sessions (SPEC §17.4, §17.6): the `GIT_LANES_USAGE` file of each session, its entry
in the lane record's `sessions[]`, and the totals per child and batch that `status`, `show` and `run`'s
summary show. A malformed usage file is a warning and is ignored."""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..domain.session import Session

KEYS = ("input_tokens", "output_tokens", "cost_usd")
MAX_USAGE_BYTES = 64 * 1024


def usage_path(log_dir: str, task: str, n: int) -> str:
    """Where session `n` of `task` may report its usage: in the session's log folder, outside every worktree."""
    return os.path.join(log_dir, f"{task}-{n}.usage.json")


def parse_usage(doc: Any) -> dict[str, float] | str:
    """The usage an executor reported (`{input_tokens, output_tokens, cost_usd}`, any of them, numbers
    >= 0; other keys ignored), or why it is malformed."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    found: dict[str, float] = {}
    for key in KEYS:
        if key not in doc or doc[key] is None:
            continue
        value = doc[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"{key}: not a number >= 0"
        found[key] = value
    return found


def parse_usage_option(text: str) -> dict[str, float]:
    """`done --usage KEY=VALUE,…` (exit 2 naming the item otherwise)."""
    from ..core.errors import usage

    doc: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in KEYS:
            raise usage(f"invalid --usage: {item.strip()!r} is not KEY=VALUE with KEY one of {', '.join(KEYS)}")
        try:
            doc[key] = float(value) if key == "cost_usd" else int(value)
        except ValueError:
            raise usage(f"invalid --usage: {key}: {value!r} is not a number") from None
    parsed = parse_usage(doc)
    if isinstance(parsed, str):
        raise usage(f"invalid --usage: {parsed}")
    return parsed


def take_usage(path: str, warn: Callable[[str], None]) -> dict[str, float] | None:
    """Read and remove the session's usage file (None: none written, or malformed: a warning)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_USAGE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        warn(f"usage file {path}: {exc.strerror or exc}; ignored")
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        if len(data) > MAX_USAGE_BYTES:
            raise ValueError("larger than 64 KiB")
        parsed = parse_usage(json.loads(data.decode("utf-8")))
    except (ValueError, RecursionError) as exc:
        parsed = f"not JSON ({exc})"
    if isinstance(parsed, str):
        warn(f"usage file {path} is malformed: {parsed}; ignored")
        return None
    return parsed


def record_session(ls: "Session", entry: dict[str, Any]) -> None:
    """Append `entry` ({n, started, ended, exit, usage}) to the lane record's `sessions[]`, under the lane's
    own lock (the lane's record transaction)."""
    from ..lane.side import LaneContext

    ctx = LaneContext.load(ls)
    ctx.update(lambda rec: {**rec, "sessions": [*rec.get("sessions", []), entry]},
               f"session {entry['n']} of {ctx.task_id}: exit {entry['exit']}")


def add(total: dict[str, float], usage: dict[str, Any] | None) -> None:
    for key in KEYS:
        if usage and usage.get(key) is not None:
            total[key] = total.get(key, 0) + usage[key]


def lane_usage(lane_record: dict[str, Any] | None) -> dict[str, float]:
    """The usage of one lane: its sessions' and `done --usage`'s (attempts carrying `usage`)."""
    total: dict[str, float] = {}
    for entry in (lane_record or {}).get("sessions", []) or []:
        add(total, entry.get("usage"))
    for attempt in (lane_record or {}).get("qa_attempts", []) or []:
        add(total, attempt.get("usage"))
    return total


def totals(s: "Session", slug: str, report: dict[str, Any]) -> dict[str, Any] | None:
    """`{input_tokens, output_tokens, cost_usd, children: {task: {…}}}` over the batch's lanes of this run
    (None when nothing reported any usage)."""
    from ..lane.view import lane_record
    from ..store import CorruptRecord

    children: dict[str, dict[str, float]] = {}
    batch: dict[str, float] = {}
    for c in report["children"]:
        lane = c.get("lane")
        if not lane:
            continue
        try:
            data, _ = lane_record(s, slug, c["task_id"])
        except CorruptRecord:
            continue
        if data is None or data.get("run_id") != lane.get("run_id"):
            continue
        used = lane_usage(data)
        if used:
            children[c["task_id"]] = _rounded(used)
            add(batch, used)
    if not children:
        return None
    return {**_rounded(batch), "children": children}


def _rounded(total: dict[str, float]) -> dict[str, float]:
    """Sums of floats kept exact to the cent's hundredth (0.1 + 0.2 is 0.3)."""
    return {k: (round(v, 6) if k == "cost_usd" else (int(v) if float(v).is_integer() else v)) for k, v in total.items()}


def cost_text(used: dict[str, Any] | None) -> str:
    if not used:
        return ""
    parts = []
    if used.get("cost_usd") is not None:
        parts.append(f"${used['cost_usd']:.2f}")
    tokens = (used.get("input_tokens") or 0) + (used.get("output_tokens") or 0)
    if tokens:
        parts.append(f"{int(tokens)} tokens")
    return ", ".join(parts)


# -- budgets (SPEC §17.4, §17.6) --------------------------------------------------------------------------

def budget_reached(record: Any, used: dict[str, Any] | None) -> str | None:
    """`budget_reached: <kind> <total> of <budget>` once the batch's usage reached one of its budgets."""
    budget = record.budget
    used = used or {}
    cost = used.get("cost_usd", 0)
    tokens = (used.get("input_tokens") or 0) + (used.get("output_tokens") or 0)
    if budget.max_cost_usd is not None and cost >= budget.max_cost_usd:
        return f"budget_reached: cost_usd {cost:g} of {budget.max_cost_usd:g}"
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return f"budget_reached: tokens {tokens:g} of {budget.max_tokens}"
    return None


def over_budget(s: "Session", slug: str, batch_id: str) -> str | None:
    """Whether the batch `batch_id` reached a budget (from its record and its lanes' records); its reason."""
    from ..tick import status_report

    snap = s.batches.read(slug)
    if snap is None or snap.record.batch_id != batch_id or \
            (snap.record.budget.max_cost_usd is None and snap.record.budget.max_tokens is None):
        return None
    return budget_reached(snap.record, totals(s, slug, status_report(s, slug)))


def stop_for_budget(s: "Session", slug: str, batch_id: str, reason: str, actor: str = "run") -> None:
    """Park every in-flight child with the budget's reason and stop the batch `needs_human` (one write; a
    batch that is no longer this one, or no longer running, is left as it is)."""
    from ..core import lifecycle

    with s.transaction(slug, actor) as tx:
        if tx.record.batch_id != batch_id or tx.record.batch_state != "running":
            return
        lifecycle.stop_batch(tx.record, "needs_human", reason)
        tx.write(f"stopped: {reason}")


def raise_budget(record: Any, usd: float | None, tokens: int | None) -> list[str]:
    """`resume --budget-usd/--budget-tokens`: the new budgets (what changed, for the audit line)."""
    changed = []
    if usd is not None:
        record.budget.max_cost_usd = usd
        changed.append(f"budget {usd:g} USD")
    if tokens is not None:
        record.budget.max_tokens = tokens
        changed.append(f"budget {tokens} tokens")
    return changed
