"""`git lanes instruct --edit` (SPEC §17.1 v4): write the text in the editor Git would open.

As `git commit` does: a template in the repository's Git folder, opened with the editor `git var
GIT_EDITOR` names; lines starting with `#` are stripped; an empty text, or the template left
unchanged, sends nothing. The template quotes what the text is about: the last failed attempt's
failing checks and the gate's failing reruns, with the last lines of their output.
"""

from __future__ import annotations

import os

from ..core.errors import usage
from ..domain.session import Session
from ..store import CorruptRecord

_QUOTED_LINES = 15   # output lines quoted per failing check


def template(s: Session, slug: str, task_id: str, kind: str) -> str:
    """The editor's starting text: an empty first line, then the commented help and failures."""
    lines = ["", f"# Write the {kind} for {task_id} above. Lines starting with '#' are ignored;",
             "# an empty text, or this template left unchanged, sends nothing.", "#"]
    snap = s.batches.read(slug)
    record = snap.record if snap is not None else None
    child = record.child(task_id) if record is not None else None
    try:
        lrec, _ = s.lanes.read(slug, task_id)
    except CorruptRecord:
        lrec = None
    if child is not None and child.lane is not None and lrec is not None and lrec.run_id == child.lane.run_id:
        failed = [a for a in lrec.qa_attempts if not a.passed]
        if failed:
            last = failed[-1]
            lines.append(f"# The last failed attempt ({last.at}, tree {last.tree[:12]}):")
            if last.note:
                lines.append(f"#   {last.note}")
            lines += _results([r.model_dump(mode="json") for r in last.results])
    if child is not None and child.gate_results:
        lines.append("# Failed on the integration candidate:")
        lines += _results([r.model_dump(mode="json") for r in child.gate_results])
    return "\n".join(lines) + "\n"


def _results(results: list[dict]) -> list[str]:
    from ..domain.checks import status_text, tail_lines

    out = []
    for r in results:
        if r["passed"]:
            continue
        out.append(f"#   FAIL {r['id']} ({status_text(r)}): {r['command']}")
        out += [f"#     {line}" for line in tail_lines(r.get("output_tail") or "", _QUOTED_LINES)]
    return out


def strip_comments(text: str) -> str:
    """The text without `#` lines and trailing blank lines/space (Git's `--cleanup=strip`, roughly)."""
    kept = [line.rstrip() for line in text.splitlines() if not line.startswith("#")]
    return "\n".join(kept).strip("\n")


def edit_text(s: Session, slug: str, task_id: str, kind: str) -> str:
    """Open the template in Git's editor and return what the user wrote; usage error (exit 2) when the
    editor failed or nothing was written."""
    start = template(s, slug, task_id, kind)
    path = os.path.join(s.git.git_dir, "LANES_EDITMSG")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(start)
    try:
        code = s.git.edit(path)
        if code != 0:
            raise usage(f"--edit: the editor exited {code}; nothing sent")
        with open(path, encoding="utf-8", errors="replace") as fh:
            written = fh.read()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    text = strip_comments(written)
    if written == start or not text.strip():
        raise usage("--edit: empty text (the template was left unchanged); nothing sent")
    return text
