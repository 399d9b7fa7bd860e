"""Lineage of the batch branch (SPEC §8.1): pure classification of facts read from Git."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineageFacts:
    expected: str                  # the expected head
    head: str                      # the coordinator's HEAD
    head_descends: bool            # expected is an ancestor of (or equal to) head
    unreachable: tuple[str, ...]   # recorded commits not reachable from head
    unrecorded_claims: tuple[str, ...]  # commits in expected..head with this batch's trailer, no record


def classify_lineage(f: LineageFacts) -> tuple[str, str | None]:
    """("intact" | "adopt" | "broken", what broke)."""
    if not f.head_descends:
        return "broken", f"batch head {f.head[:12]} does not descend from the expected head {f.expected[:12]}"
    if f.unreachable:
        return "broken", "recorded commit " + ", ".join(c[:12] for c in f.unreachable) + " is not on the batch branch"
    if f.unrecorded_claims:
        return "broken", ("commit " + ", ".join(c[:12] for c in f.unrecorded_claims)
                          + " claims this batch without a record")
    if f.head != f.expected:
        return "adopt", None
    return "intact", None


def expected_head(base_head: str, commits: list[str], adopted: list[tuple[str, str]]) -> str:
    """The last integrated commit, else the base, then follow the adopted heads."""
    head = commits[-1] if commits else base_head
    moved = True
    while moved:
        moved = False
        for frm, to in adopted:
            if frm == head and to != head:
                head, moved = to, True
    return head
