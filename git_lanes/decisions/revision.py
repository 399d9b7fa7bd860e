"""Revision bounds (SPEC §10.1): pure classification of a proposed intent against the current one.

`classify` tells a compatible change (only acceptance items added) from a breaking one and
lists what changed; `envelope_refusals` lists what puts a breaking change outside the envelope
a revision-delegation grant covers; `decide` picks who approves it, or why nobody may.
No I/O: the caller reads the intents, the grant and the person's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, Sequence

from ..plan.intent import AcceptanceItem, Intent

_WILDCARDS = ("*", "?", "[", "]")

# Fields a grant never lets the coordinator change (SPEC §10.1), in the order they are reported.
ENVELOPE_FIELDS = ("task_id", "goal", "owner", "risk", "spec", "blocked_by", "review", "issue")
# Fields nobody may change within a batch: the child's identity and its place in the dependency
# graph are fixed when the batch is confirmed (the gate compares `blocked_by` with the record).
FIXED_FIELDS = ("task_id", "blocked_by")


@dataclass(frozen=True)
class Change:
    """What differs between the current intent and the proposed one."""

    compatible: bool                 # only acceptance items were added
    changed: tuple[str, ...]         # every changed field but `revision`, in intent field order
    acceptance_added: tuple[str, ...] = ()
    acceptance_changed: tuple[str, ...] = ()
    acceptance_removed: tuple[str, ...] = ()
    scope_added: tuple[str, ...] = ()    # proposed entries the current scope does not cover
    scope_removed: tuple[str, ...] = ()


Actor = Literal["executor", "batch-coordinator", "user"]


@dataclass(frozen=True)
class Decision:
    """Approved (`actor` set) or refused (`refusal` and `fallback` set)."""

    actor: Actor | None = None
    refusal: str | None = None
    fallback: str | None = None
    needs_person: bool = False       # approval hinges on a person's confirmation


def _norm(entry: str) -> str:
    return entry.strip().rstrip("/")


def _literal(segment: str) -> bool:
    return not any(ch in segment for ch in _WILDCARDS)


def entry_covered(entry: str, scope: Sequence[str]) -> bool:
    """Whether every path the scope entry `entry` admits is admitted by `scope` too.

    Mirrors the enforcement of SPEC §3 (a path is inside when it matches `:(glob)<e>` or lies
    under what `<e>` matches): an entry is covered by an equal entry, or when a leading run of
    its segments is matched, segment by segment, by another entry. A segment with wildcards is
    only covered by an equal segment or by `*`; `**` covers nothing but itself (conservative:
    anything not provably narrower counts as widening).
    """
    mine = _norm(entry).split("/")
    for other in scope:
        theirs = _norm(other).split("/")
        if _norm(other) == _norm(entry):
            return True
        if len(theirs) > len(mine):
            continue
        if all(_segment_covered(m, t) for m, t in zip(mine, theirs)):
            return True
    return False


def _segment_covered(mine: str, theirs: str) -> bool:
    if mine == theirs:
        return True
    if theirs == "**" or "**" in mine:
        return False
    if _literal(mine):
        return fnmatchcase(mine, theirs)
    return theirs == "*"


def _item(a: AcceptanceItem) -> dict:
    return a.model_dump()


def classify(current: Intent, proposed: Intent) -> Change:
    """Compare two validated intents (defaults filled in, `revision` ignored)."""
    changed = []
    for name in Intent.model_fields:
        if name == "revision":
            continue
        if name == "scope":
            differs = [_norm(e) for e in current.scope] != [_norm(e) for e in proposed.scope]
        elif name == "acceptance":
            differs = [_item(a) for a in current.acceptance] != [_item(a) for a in proposed.acceptance]
        else:
            differs = getattr(current, name) != getattr(proposed, name)
        if differs:
            changed.append(name)
    old = {a.id: _item(a) for a in current.acceptance}
    new = {a.id: _item(a) for a in proposed.acceptance}
    added = tuple(i for i in new if i not in old)
    removed = tuple(i for i in old if i not in new)
    modified = tuple(i for i in new if i in old and new[i] != old[i])
    kept_order = [i for i in new if i in old] == [i for i in old if i in new]
    scope_added = tuple(e for e in proposed.scope if not entry_covered(e, current.scope))
    scope_removed = tuple(e for e in current.scope if _norm(e) not in {_norm(p) for p in proposed.scope})
    compatible = (changed == ["acceptance"] and added and not removed and not modified and kept_order)
    return Change(compatible=bool(compatible), changed=tuple(changed), acceptance_added=added,
                  acceptance_changed=modified, acceptance_removed=removed,
                  scope_added=scope_added, scope_removed=scope_removed)


def envelope_refusals(change: Change) -> list[str]:
    """Why a breaking change lies outside the delegated envelope (empty: inside it).

    Refused: goal, owner, task id, risk, bound spec, `blocked_by`, `review` or `issue` changed,
    or the scope widened. Narrowing the scope and changing, adding or removing acceptance
    items stay inside.
    """
    out = [f"{name} changed" for name in ENVELOPE_FIELDS if name in change.changed]
    if change.scope_added:
        out.append("scope widened (" + ", ".join(change.scope_added) + ")")
    return out


def fixed_refusals(current: Intent, proposed: Intent, change: Change) -> list[str]:
    """What nobody may change inside a batch, whoever approves."""
    out = [f"{name} changed" for name in FIXED_FIELDS if name in change.changed]
    if proposed.risk == "critical" and current.risk != "critical":
        out.append('risk raised to "critical" (critical tasks are never batched)')
    return out


def describe(change: Change) -> str:
    """One line: what the revision changes."""
    parts = []
    for name in change.changed:
        if name == "acceptance":
            bits = []
            if change.acceptance_added:
                bits.append("added " + ", ".join(change.acceptance_added))
            if change.acceptance_changed:
                bits.append("changed " + ", ".join(change.acceptance_changed))
            if change.acceptance_removed:
                bits.append("removed " + ", ".join(change.acceptance_removed))
            parts.append("acceptance " + ("; ".join(bits) if bits else "reordered"))
        elif name == "scope":
            parts.append("scope " + ("widened" if change.scope_added else "narrowed"))
        else:
            parts.append(f"{name} changed")
    return ", ".join(parts) or "nothing but the revision number"


def decide(task_id: str, change: Change, fixed: list[str], *, granted: bool, yes: bool,
           interactive: bool, again: str = "") -> Decision:
    """Who approves the change, or the refusal (reason text after `batch_revision_refused: `);
    `again` is the `revise` command a person runs to approve it (the fallback names it).

    Order: what nobody may change; compatible → executor; breaking inside the envelope under a
    grant → batch-coordinator; `--yes` → user; a terminal → ask the person (`needs_person`);
    else refused.
    """
    if fixed:
        return Decision(refusal=f"{task_id}: " + "; ".join(fixed) + " (fixed for the whole batch)",
                        fallback="retire the batch ('git lanes retire'), change the plan on the batch branch, "
                                 "and start a new batch")
    if change.compatible:
        return Decision(actor="executor")
    outside = envelope_refusals(change)
    if granted and not outside:
        return Decision(actor="batch-coordinator")
    if yes:
        return Decision(actor="user")
    if interactive:
        return Decision(actor="user", needs_person=True)
    again = again or f"git lanes revise {task_id} --intent FILE"
    person = f"a person approves it: run '{again}' at a terminal, or with --yes"
    if granted:
        return Decision(refusal=f"{task_id}: outside the delegated envelope: " + "; ".join(outside),
                        fallback=person + "; or propose a revision inside the envelope (narrow the scope, "
                                          "change only acceptance items)")
    return Decision(refusal=f"{task_id}: a breaking revision ({describe(change)}) needs a person's approval "
                            "and the batch holds no revision-delegation grant",
                    fallback=person + "; or resume the batch with --delegate-revisions for changes inside "
                                      "the envelope")
