"""Handoffs, the stop decision and the report (SPEC §7 steps 13-16, §16). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..decisions.obligation import MAX_CORRECTIONS
from ..decisions.schedule import startable
from .model import DONE, IN_FLIGHT, BatchRecord, Child, Report


@dataclass
class LaneView:
    """Read-only observations of one lane (gathered by the effectful side)."""
    next_obligation: str | None = None   # implement | review | settled
    record_revision: int = 0
    clean_on_branch: bool = False        # exists, on its branch, clean


@dataclass
class Extras:
    """What one command adds to the report beyond the record."""
    lane_refusals: list[dict[str, Any]] = field(default_factory=list)
    tracker_observations: list[dict[str, Any]] = field(default_factory=list)
    lane_instruction: dict[str, Any] | None = None
    lane_revision: dict[str, Any] | None = None
    final_verification: dict[str, Any] | None = None
    first_park: str | None = None


def lanes_ever(record: BatchRecord) -> int:
    """Children that ever had a lane in this batch (what `max_children` counts; one carried over had none)."""
    restarted = {a.task_id for a in record.archived_lanes}

    def had_one(c: Child) -> bool:
        if c.lane is not None:
            return not c.lane.carried_over
        return c.state not in ("pending", "skipped_blocked") or c.task_id in restarted
    return sum(1 for c in record.children if had_one(c))


def budget_left(record: BatchRecord) -> int:
    return max(0, record.budget.max_children - lanes_ever(record))


@dataclass(frozen=True)
class _OutOfBudget:
    """A pending child the budget does not let start, as the scheduler sees it (it starts nothing)."""
    task_id: str
    blocked_by: list[str]
    state: str = "out_of_budget"
    lane: None = None


def startable_now(record: BatchRecord, scopes: dict[str, list[str]]) -> list[str]:
    """Startable children within the budget. A restarted child was counted when it first had a lane, so
    its new lane costs no budget (else a restart in a batch whose budget is spent could never run)."""
    left = budget_left(record)
    counted = {a.task_id for a in record.archived_lanes}
    children = list(record.children)
    while True:
        chosen = startable(children, record.max_parallel, scopes)
        fresh = [t for t in chosen if t not in counted]
        if len(fresh) <= left:
            return chosen
        over = set(fresh[left:])
        children = [_OutOfBudget(c.task_id, list(c.blocked_by)) if c.task_id in over else c for c in children]


def stop_decision(record: BatchRecord, scopes: dict[str, list[str]], first_park: str | None) -> tuple[str, str] | None:
    """Step 14: (state, reason) when nothing is in flight and nothing can start, else None."""
    if any(c.state in IN_FLIGHT for c in record.children):
        return None
    if all(c.state in DONE for c in record.children):
        return None  # completion is step 12's business
    if startable_now(record, scopes):
        return None
    if any(c.state in ("needs_human", "skipped_blocked") for c in record.children):
        return "needs_human", first_park or "a parked child needs a human decision"
    if budget_left(record) == 0:
        return "budget_stopped", f"max_children budget exhausted ({record.budget.max_children})"
    return "needs_human", "no child can start"


def _located(c: Child, handoff: dict[str, Any]) -> dict[str, Any]:
    """A lane of another clone is named by `remote {clone_id, host}` besides its null `lane_path` (§14)."""
    if c.lane is not None and c.lane.remote is not None:
        handoff["remote"] = c.lane.remote.model_dump(mode="json")
    return handoff


def handoffs(record: BatchRecord, views: dict[str, LaneView], scopes: dict[str, list[str]],
             head: str | None, on_branch: set[str], schedule: bool = True) -> list[dict[str, Any]]:
    """Steps 13 and 15: executor/correction handoffs, release handoffs, provision handoffs."""
    out: list[dict[str, Any]] = []
    for c in record.children:
        if c.state == "enrolled" and c.lane:
            if c.correction_due:
                out.append(_located(c, {"role": "coordinator", "action": "correct", "task_id": c.task_id,
                                        "reason": c.correction_due, "corrections_used": c.corrections,
                                        "corrections_left": MAX_CORRECTIONS - c.corrections,
                                        "lane_path": c.lane.path}))
            else:
                v = views.get(c.task_id, LaneView())
                out.append(_located(c, {"role": "executor", "task_id": c.task_id, "run_id": c.lane.run_id,
                                        "record_revision": v.record_revision,
                                        "next_obligation": v.next_obligation or "implement",
                                        "lane_branch": c.lane.branch, "lane_path": c.lane.path}))
    for c in record.children:
        if c.state == "integrated" and c.lane and c.commit in on_branch and views.get(c.task_id, LaneView()).clean_on_branch:
            out.append(_located(c, {"role": "lane-steward", "action": "release", "task_id": c.task_id,
                                    "lane_branch": c.lane.branch, "lane_path": c.lane.path}))
    if schedule and record.batch_state == "running" and head is not None:
        for task_id in startable_now(record, scopes):
            out.append({"role": "lane-steward", "action": "provision", "task_id": task_id,
                        "lane_branch": f"imm-lane/{record.slug}/{task_id}", "base_head": head})
    return out


def _q(word: str) -> str:
    """A word as a shell takes it (quoted only when it must be)."""
    import shlex

    return shlex.quote(word)


def land_command(record: BatchRecord) -> str:
    """How to land the batch branch on the branch `start` ran from (SPEC §13 v3)."""
    if record.base_branch and record.base_branch != record.branch:
        return f"git switch {_q(record.base_branch)} && git merge --ff-only {_q(record.branch)}"
    return f"git merge --ff-only {_q(record.branch)} (on the branch it should land on)"


def landed_action(record: BatchRecord, leftovers: bool) -> str:
    """`next_action` of a completed batch whose head is already on `base_branch` (SPEC §17.1 v4)."""
    text = f"Batch completed; landed on {record.base_branch}."
    if leftovers:
        text += f" Remove its leftover lanes with git lanes release --stale {_q(record.slug)}."
    return text


def correction_command(slug: str, task_id: str) -> str:
    """The correction hint (SPEC §17.6 v4): the text comes from a file the caller writes (or `--edit`)."""
    return (f"git lanes instruct {_q(task_id)} --kind correction --session-state idle --file <file> "
            f"--slug {_q(slug)}")


def handoff_command(slug: str, h: dict[str, Any]) -> str:
    """The command that carries a handoff out, as it can be pasted."""
    task = _q(h["task_id"])
    action = h.get("action")
    where = h.get("remote")   # (v4) a lane of another clone: where it lives, not a command here (§17.2)
    if where and action != "correct":
        machine = f"clone {where['clone_id']} on {where['host']}"
        if action == "release":
            return f"in {machine}: git lanes release {task} --slug {_q(slug)} (its git lanes work does it)"
        return f"in {machine}: its git lanes work runs the executor there"
    if action == "correct":
        return correction_command(slug, h["task_id"])
    if action == "provision":
        return f"git lanes provision {task} --slug {_q(slug)}"
    if action == "release":
        return f"git lanes release {task} --slug {_q(slug)}"
    path = _q(h.get("lane_path") or ".")
    if h.get("next_obligation") == "review":
        return (f"git lanes review {task} --slug {_q(slug)} --approve (or git lanes review {task} --slug {_q(slug)} "
                "--reject -m <reason>)")
    return f"git -C {path} lanes task, then work there and run git -C {path} lanes done"


def parked_commands(record: BatchRecord) -> list[str]:
    """For each parked child: how to look at it and how to free it (running batch: by name)."""
    slug = _q(record.slug)
    out = []
    for c in record.children:
        if c.state != "needs_human":
            continue
        task = _q(c.task_id)
        if (c.reason or "").startswith("plan_changed"):
            # SPEC §7 step 1: a resume would park it again; retire and a new start are the way on (the
            # retired batch's lanes go first, their tips kept in its record: `start` refuses stale lanes)
            free = (f"git lanes retire {slug} --yes, then git lanes release --stale {slug}, "
                    f"then git lanes start {slug} --yes")
        elif record.batch_state == "running":
            free = f"git lanes resume {slug} {task} (or git lanes resume {slug} --restart {task})"
        else:
            free = f"git lanes resume {slug} --yes (or git lanes resume {slug} --restart {task} --yes)"
        out.append(f"git lanes show {task} --slug {slug}, then {free}")
    return out


def next_action(record: BatchRecord, hand: list[dict[str, Any]]) -> str:
    """Step 16, plus the terminal and parked states: every command complete, ready to paste (§6.2 v3)."""
    state = record.batch_state
    slug = _q(record.slug)
    if state == "completed":
        releases = [h for h in hand if h.get("action") == "release"]
        if releases:
            return ("Batch completed; release the integrated lanes: "
                    + "; ".join(handoff_command(record.slug, h) for h in releases)
                    + f"; then land it: {land_command(record)}.")
        return f"Batch completed; land it: {land_command(record)}."
    if state in ("failed", "budget_stopped", "superseded"):
        return (f"Batch {state}; nothing more will integrate. Inspect it with git lanes status {slug}; remove its "
                f"lanes with git lanes release --stale {slug}, or start anew with git lanes start {slug}.")
    if state == "needs_human":
        return ("A person must decide. " + "; ".join(parked_commands(record) or
                                                     [f"git lanes status {slug}, then git lanes resume {slug} --yes"])
                + f"; or give the batch up with git lanes retire {slug} --yes.")
    parked = parked_commands(record)
    tail = (" Parked: " + "; ".join(parked) + ".") if parked else ""
    correct = next((h for h in hand if h.get("action") == "correct"), None)
    if correct is not None:
        return ("Read the failing checks' output (git lanes show " + _q(correct["task_id"]) + f" --slug {slug}) and "
                "send one design-level correction written to a file with "
                + correction_command(record.slug, correct["task_id"]) + " (or --edit instead of --file on a terminal)."
                + tail)
    passed = [c.task_id for c in record.children if c.state in ("settled", "lane_committed")]
    if passed:   # SPEC §17.1 v4: nothing to redo for them
        tail = (f" {', '.join(passed)} passed; the next tick lands {'it' if len(passed) == 1 else 'them'} "
                f"(git lanes tick {slug}).") + tail
    provisions = [h for h in hand if h.get("action") == "provision"]
    if provisions:
        return ("Provide a lane for each provision handoff: "
                + "; ".join(handoff_command(record.slug, h) for h in provisions) + "." + tail)
    if passed and not any(h.get("role") == "executor" for h in hand):
        return tail.strip()
    return ("Run the executor handoffs (in each lane: git lanes task, the work, git lanes done), then "
            f"git lanes tick {slug} when a lane finishes." + tail)


def child_json(c: Child, view: LaneView | None) -> dict[str, Any]:
    data = c.model_dump(mode="json", exclude_none=False)
    data["lane"] = c.lane.model_dump(mode="json") if c.lane else None
    if data.get("tracker_closed") is None:
        data.pop("tracker_closed", None)
    if not data.get("gate_results"):
        data.pop("gate_results", None)
    if c.state == "enrolled":
        data["next_obligation"] = (view.next_obligation if view else None) or "implement"
    return data


def build_report(record: BatchRecord, *, state: str | None = None, reason: str | None = None,
                 hand: list[dict[str, Any]] | None = None, views: dict[str, LaneView] | None = None,
                 extras: Extras | None = None, commits: list[str] | None = None,
                 created_at: str | None = None, action: str | None = None) -> Report:
    views = views or {}
    extras = extras or Extras()
    hand = hand or []
    return Report(
        batch_id=record.batch_id, slug=record.slug, batch_state=state or record.batch_state,
        max_parallel=record.max_parallel,
        children=[child_json(c, views.get(c.task_id)) for c in record.children],
        commits=commits if commits is not None else record.commits(),
        reason=reason if reason is not None else record.reason,
        handoffs=hand, next_action=action or next_action(record, hand),
        created_at=created_at or record.updated_at,
        lane_refusals=extras.lane_refusals, tracker_observations=extras.tracker_observations,
        restores=[r.model_dump(mode="json") for r in record.restores],
        final_verification=extras.final_verification or (
            record.final_verification.model_dump(mode="json") if record.final_verification else None),
        interventions=[i.model_dump(mode="json") for i in record.interventions],
        lane_instruction=extras.lane_instruction, lane_revision=extras.lane_revision,
        revisions=[r.model_dump(mode="json") for r in record.revisions],
        reseals=[r.model_dump(mode="json") for r in record.reseals],
        adopted_heads=[a.model_dump(mode="json", by_alias=True) for a in record.adopted_heads],
        reviews=[r.model_dump(mode="json") for r in record.reviews],
        candidate=record.candidate.model_dump(mode="json", exclude={"results"}) if record.candidate else None,
        candidates=[c.model_dump(mode="json") for c in record.candidates],
    )
