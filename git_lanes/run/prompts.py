"""The texts `run` writes (SPEC §13): the executor's prompt and the default correction. Pure."""

from __future__ import annotations

from typing import Any

from ..decisions.instruction import MAX_TEXT

PROMPT_LIMIT = 100_000  # characters; an environment string must stay well below 128 KiB


def _outcome(result: dict[str, Any]) -> str:
    if result.get("signal"):
        return f"killed by {result['signal']}"
    if result.get("exit_code") is None:
        return "did not run"
    return f"exit code {result['exit_code']}"


def failing_checks(lane_record) -> list[dict[str, Any]]:
    """The failing results of the lane's last attempt when it failed (else [])."""
    if lane_record is None or not lane_record.qa_attempts or lane_record.qa_attempts[-1].passed:
        return []
    last = lane_record.qa_attempts[-1]
    failed = [r.model_dump(mode="json") for r in last.results if not r.passed]
    if last.note:
        failed.append({"id": "delivery", "command": "git lanes done", "exit_code": None, "signal": None,
                       "passed": False, "output_tail": last.note})
    return failed


def failure_text(failed: list[dict[str, Any]]) -> str:
    """The failing checks with their whole output tails (what a corrector reads on stdin)."""
    parts = []
    for r in failed:
        parts.append(f"[{r['id']}] {r['command']} ({_outcome(r)})\n{r['output_tail'].rstrip()}\n")
    return "\n".join(parts)


def _quoted(tail: str, texts: list[str]) -> bool:
    """Does one of `texts` already quote this output (its last lines, as a correction keeps them)?"""
    last = [line.strip() for line in tail.splitlines() if line.strip()][-3:]
    return bool(last) and any(all(line in text for line in last) for text in texts)


def build_prompt(info: dict[str, Any], failed: list[dict[str, Any]]) -> str:
    """`GIT_LANES_PROMPT`: goal, scope, acceptance with checks, the last failure, unread texts."""
    lines = [f"Task {info['task_id']} of the initiative {info['slug']} (batch {info['batch_id']}).", "",
             "Goal:", info["goal"].rstrip(), "", "Scope (change only these paths):"]
    lines += [f"  {p}" for p in info["scope"]]
    lines += ["", "Acceptance (every check must pass; they run in this directory):"]
    for a in info["acceptance"]:
        lines += [f"  [{a['id']}] {a['text']}", f"      check: {a['check']}"]
    if failed:
        lines += ["", "The last attempt failed. Failing checks:"]
        unread = [item["text"] for item in info.get("unread") or []]
        for r in failed:
            lines.append(f"  [{r['id']}] {r['command']} ({_outcome(r)})")
            if _quoted(r["output_tail"], unread):   # each failure quoted once (SPEC §13 v3)
                lines.append("    (its output is quoted in the correction below)")
            else:
                lines += ["    " + line for line in r["output_tail"].rstrip().splitlines()]
    if info.get("unread"):
        lines += ["", "Unread instructions and corrections (oldest first):"]
        for item in info["unread"]:
            lines += [f"--- {item['kind']} ({item['at']}) ---", item["text"].rstrip()]
    lines += ["", "Work in this directory (the lane). When the work is done, run 'git lanes done' or simply "
                  "exit: the driver then runs it for you. If you cannot finish, run "
                  "'git lanes done --give-up -m \"<why>\"'."]
    text = "\n".join(lines) + "\n"
    if len(text) > PROMPT_LIMIT:
        text = text[:PROMPT_LIMIT - 40] + "\n[prompt truncated]\n"
    return text


def _fair_shares(lengths: list[int], budget: int) -> list[int]:
    """Split `budget` over items of `lengths`, evenly, giving what a short item leaves to the others."""
    shares = [0] * len(lengths)
    left = max(0, budget)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for k, i in enumerate(order):
        shares[i] = min(lengths[i], left // (len(order) - k))
        left -= shares[i]
    return shares


def default_correction(task_id: str, failed: list[dict[str, Any]], limit: int = MAX_TEXT) -> str:
    """Names the failing checks and quotes their output tails; at most `limit` characters in all."""
    head = (f"Correction for {task_id}: the QA failure limit was reached. Step back and change the approach; "
            "make the failing checks below pass (without changing the checks themselves).\n")
    if not failed:
        return (head + "No failing check output was recorded.")[:limit]
    heads = []
    for r in failed:
        command = r["command"] if len(r["command"]) <= 200 else r["command"][:197] + "..."
        heads.append(f"\n[{r['id']}] {command} ({_outcome(r)}):\n")
    tails = [r["output_tail"].rstrip() for r in failed]
    budget = limit - len(head) - sum(len(h) + 1 for h in heads)
    shares = _fair_shares([len(t) for t in tails], budget)
    text = head
    for h, tail, share in zip(heads, tails, shares):
        if share < len(tail):
            tail = ("..." + tail[len(tail) - share + 3:]) if share > 3 else ""
        text += h + tail + "\n"
    return text[:limit]
