"""What a lane owes next (SPEC §5), and the QA failure limit (SPEC §7 step 7). Pure."""

from __future__ import annotations

from dataclasses import dataclass

MAX_CORRECTIONS = 2


def after_pass(attempt_at: str, attempt_tree: str, *, review_required: bool, last_revision_at: str | None,
               verdicts: list[tuple[str, str, str | None]]) -> str:
    """The obligation after a passed attempt: `settled`, `review` (no verdict on it yet) or
    `implement` (a review rejected it, or a revision approved since asks for a new `done`).

    `verdicts`: (at, verdict, tree) of the child's reviews, oldest first."""
    if last_revision_at is not None and attempt_at < last_revision_at:
        return "implement"
    if not review_required:
        return "settled"
    mine = [v for at, v, tree in verdicts if tree == attempt_tree and at >= attempt_at]
    if not mine:
        return "review"
    return "settled" if mine[-1] == "approve" else "implement"


@dataclass(frozen=True)
class QaVerdict:
    """What the failed attempts seen so far mean for a child."""
    qa_failures: int
    correction_due: bool = False
    park: str | None = None


def qa_limit(qa_failures: int, new_failures: int, last_passed: bool, *, limit: int, corrections: int,
             correction_due: bool) -> QaVerdict:
    """Count the new failed attempts; at the limit a correction is due (at most two), then a park."""
    failures = qa_failures + new_failures
    if failures < limit or correction_due or last_passed:
        return QaVerdict(failures)
    if corrections < MAX_CORRECTIONS:
        return QaVerdict(failures, correction_due=True)
    return QaVerdict(failures, park=f"batch_correction_limit_reached: QA failure limit reached after "
                                    f"{corrections} coordinator corrections")
