"""The v1 record and report schemas (SPEC §4, §5, §16), with the invariants of §4 (v4 fields: `model4.py`).

Every write validates the whole record first (`BatchRecord.model_validate` runs the invariant checks) and writes
nothing if it is invalid."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_serializer, model_validator

from .checkmodel import CheckResultModel, CheckRun  # noqa: F401 (re-exported)
from .clock import now, parse_time  # noqa: F401 (the record's clock, re-exported)
from .contracts import BATCH_RECORD, BATCH_REPORT, CONTRACTS, LANE_RECORD, RECEIPT, STORE_LAYOUT  # noqa: F401 (re-exported)
from .ids import id_problem
from .pydantic_plugins import no_plugin_discovery

no_plugin_discovery()   # before any model below is built

from .model4 import ConfirmedBy, SessionEntry, Usage, UsageBudget, _Model  # noqa: E402,F401 (v4 fields, re-exported)

BatchState = Literal["running", "needs_human", "completed", "budget_stopped", "failed", "superseded"]
TERMINAL = ("completed", "budget_stopped", "failed", "superseded")
ChildState = Literal["pending", "enrolled", "settled", "lane_committed", "integrated", "released",
                     "needs_human", "skipped_blocked"]
IN_FLIGHT = ("enrolled", "settled", "lane_committed")
DONE = ("integrated", "released")


# Names that reach Git command lines and file paths are checked on every read and write: a
# tampered record is refused as corrupt, never handed to Git as an option or used as a path.
Oid = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")]
_BATCH_ID = re.compile(r"^(?P<slug>.+)-\d{8}T\d{6}Z-[0-9a-f]{6}$")


def _valid_id(task: bool):
    def check(value: str) -> str:
        problem = id_problem(value, task=task)
        if problem:
            raise ValueError(problem)
        return value
    return AfterValidator(check)


TaskId = Annotated[str, _valid_id(task=True)]
Slug = Annotated[str, _valid_id(task=False)]


# The optional fields added within contract v1 (SPEC §4, §5, §14 v3): left out while unset, so a record
# that does not use them is stored (and reported) exactly as before and a v1 reader never meets them;
# and `tracker_closed`, "only true" (§4): present once the issue is closed, absent before.
_OPTIONAL_V1 = ("base_branch", "resumed_at", "gate_results", "record_tip", "remote", "claim", "released",
                "branch_kept", "tracker_closed", "receipts", "candidates", "verify_window", "passed_at",
                "remote_restarts", "remote_timeout", "confirmed_by", "sessions")


class _V3Model(_Model):
    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        data = handler(self)
        for key in _OPTIONAL_V1:
            if key in data and data[key] in (None, []):
                del data[key]
        return data


class RemoteLocator(_Model):
    """Where a lane of another clone lives (SPEC §14): that clone's `lanes.cloneId` and host name."""
    clone_id: str
    host: str


CARRIED_OVER = "carried-over"   # the run_id of a carried-over child's stand-in lane


class Lane(_V3Model):
    path: Annotated[str, StringConstraints(pattern="^(?:/|$)")] | None   # real (absolute) path; null: other clone
    branch: str
    base_head: Oid
    run_id: str
    lane_commit: Oid | None = None
    executor_commits: list[Oid] = []
    # Index (in the lane record's qa_attempts) of the passed attempt this child settled on.
    attempt: int | None = None
    remote: RemoteLocator | None = None   # a lane in another clone (then `path` is null)
    # Released with `--keep-branch`: the branch is the user's now; nothing git-lanes does deletes it.
    branch_kept: Literal[True] | None = None

    @property
    def carried_over(self) -> bool:
        """The stand-in lane of a child `start` carried over from an earlier batch (SPEC §6): it never had
        a lane in this batch, so none is released and `max_children` does not count it."""
        return self.run_id == CARRIED_OVER

    @model_validator(mode="after")
    def _located(self) -> "Lane":
        if (self.path is None) == (self.remote is None):
            raise ValueError("a lane has either a path (a worktree here) or remote (another clone), not both")
        return self


class Child(_V3Model):
    task_id: TaskId
    blocked_by: list[TaskId] = []
    state: ChildState = "pending"
    reason: str | None = None
    commit: Oid | None = None
    lane: Lane | None = None
    settled_at: str | None = None
    qa_failures: int = Field(0, ge=0)
    qa_attempts_seen: int = Field(0, ge=0)
    corrections: int = Field(0, ge=0, le=2)
    correction_due: str | None = None
    tracker_closed: Literal[True] | None = None
    # (v3) When `resume` last freed this child: attempts and give-ups older than it are history.
    resumed_at: str | None = None
    # The failing rerun results of the candidate that parked it (SPEC §2.1 v3).
    gate_results: list[CheckResultModel] = []
    remote_restarts: int | None = Field(None, ge=1)   # (v4) ticks that restarted its lost remote lane (§17.2)

    def check(self) -> None:
        s = self.state
        where = f"child {self.task_id}"
        if s in ("needs_human", "skipped_blocked") and not self.reason:
            raise ValueError(f"{where}: state {s} needs a reason")
        if (self.commit is not None) != (s in DONE):
            raise ValueError(f"{where}: commit must be set exactly when integrated or released")
        if s in ("pending", "skipped_blocked") and self.lane is not None:
            raise ValueError(f"{where}: a {s} child has no lane")
        if s in IN_FLIGHT + DONE and self.lane is None:
            raise ValueError(f"{where}: a {s} child needs its lane")
        if self.correction_due is not None and s != "enrolled":
            raise ValueError(f"{where}: correction_due only while enrolled")
        if self.tracker_closed and s not in DONE:
            raise ValueError(f"{where}: tracker_closed only when integrated or released")
        if s in ("lane_committed", "integrated", "released") and self.lane and not self.lane.lane_commit:
            raise ValueError(f"{where}: a {s} child needs its lane commit")


class Budget(UsageBudget):
    max_children: int = Field(ge=1)
    qa_failure_limit: int = Field(ge=1)


class AdoptedHead(_Model):
    from_: Oid = Field(alias="from")
    to: Oid


class RestorePath(_Model):
    path: str
    kind: Literal["untracked", "modified"]
    lane_task_id: str


class Restore(_Model):
    at: str
    backup: str
    paths: list[RestorePath]


class Intervention(_Model):
    at: str
    task_id: str
    kind: Literal["instruction", "correction", "review"]
    text: str
    text_digest: str


class FinalVerification(_Model):
    passed: bool
    head: Oid
    results: list[CheckResultModel]


class RevisionDelegation(_Model):
    confirmation_time: str


class Revision(_Model):
    at: str
    task_id: str
    from_revision: int
    to_revision: int
    intent_content_hash: str
    intent_text: str
    actor: Literal["executor", "batch-coordinator", "user", "agent"]
    confirmation_ref: str | None = None


class Review(_Model):
    at: str
    task_id: str
    verdict: Literal["approve", "reject"]
    text: str | None = None
    tree: Oid | None = None  # the passed attempt's tree the verdict applies to


class IntentIdentity(_Model):
    task_id: str
    intent_path: str
    intent_revision: int
    intent_content_hash: str


class Reseal(_Model):
    at: str
    task_id: str
    from_digest: str
    to_digest: str
    intent_revision: int
    intent_content_hash: str


class ArchivedLane(_V3Model):
    """A lane tip that never integrated, kept reachable from the record (restart, stale release)."""
    at: str
    task_id: str
    branch: str
    tip: Oid
    run_id: str | None = None  # the run that lane belonged to (its lane record is not this run's)
    record_tip: Oid | None = None  # (v3) the lane record's last state commit (its ref is deleted)


class Candidate(_V3Model):
    """A candidate of the window (SPEC §8.6, §8.9 v4), built on `head` (the batch head or the commit of
    the candidate before it); `passed` with its rerun `results` once verified, landed in order."""
    task_id: str
    commit: Oid
    head: Oid
    at: str
    state: Literal["verifying", "passed", "waiting"] = "verifying"
    passed_at: str | None = None
    results: list[CheckResultModel] = []


class BatchRecord(_V3Model):
    contract: Literal["git_lanes/batch_record/v1"] = BATCH_RECORD
    batch_id: str
    slug: Slug
    plan_digest: str
    base_head: Oid
    branch: str
    base_branch: str | None = None  # (v3) the branch `start` ran from (short name); None when detached
    coordinator: str
    confirmation_time: str
    confirmed_by: ConfirmedBy | None = None  # (v4) an MCP client's confirmation (SPEC §17.6)
    budget: Budget
    max_parallel: int = Field(ge=1)
    batch_state: BatchState = "running"
    reason: str | None = None
    children: list[Child]
    adopted_heads: list[AdoptedHead] = []
    restores: list[Restore] = []
    interventions: list[Intervention] = []
    final_checks: list[str] = []
    final_verification: FinalVerification | None = None
    revision_delegation: RevisionDelegation | None = None
    revisions: list[Revision] = []
    reviews: list[Review] = []
    intent_identities: dict[str, IntentIdentity] = {}
    reseals: list[Reseal] = []
    archived_lanes: list[ArchivedLane] = []
    remote_timeout: int | None = Field(None, ge=1)   # (v4) lanes.remoteTimeout at start, for every machine (§17.2)
    tracker_github: str | None = None
    candidates: list[Candidate] = []   # (v4) the window, in landing order (v3's `candidate` read as one)
    verify_window: int | None = Field(None, ge=1)   # (v4) absent: 1
    receipts: bool | None = None    # (v4) False: `start`/`run --no-receipts`, obeyed by every tick and `done` (§8.7)
    created_at: str
    updated_at: str

    @model_validator(mode="before")
    @classmethod
    def _v3_candidate(cls, data: Any) -> Any:
        if isinstance(data, dict) and "candidate" in data:
            data = dict(data)
            old = data.pop("candidate")
            if old is not None and not data.get("candidates"):
                data["candidates"] = [old]
        return data

    @property
    def candidate(self) -> Candidate | None:
        """The first candidate of the window (v3's one candidate)."""
        return self.candidates[0] if self.candidates else None

    @model_validator(mode="after")
    def _invariants(self) -> "BatchRecord":
        seen = set()
        for child in self.children:
            if child.task_id in seen:
                raise ValueError(f"child {child.task_id} appears twice")
            seen.add(child.task_id)
            child.check()
        for child in self.children:
            for dep in child.blocked_by:
                if dep not in seen:
                    raise ValueError(f"child {child.task_id}: unknown blocker {dep}")
        if self.branch != f"imm/{self.slug}":
            raise ValueError(f"branch must be imm/{self.slug}")
        found = _BATCH_ID.match(self.batch_id)
        if not found or found.group("slug") != self.slug:
            raise ValueError(f"batch_id {self.batch_id!r} is not <slug>-<yyyymmddThhmmssZ>-<6 hex>")

        state = self.batch_state
        if state in ("failed", "budget_stopped", "superseded"):
            busy = [c.task_id for c in self.children if c.state in IN_FLIGHT]
            if busy:
                raise ValueError(f"a {state} batch holds no in-flight child ({', '.join(busy)})")
        if state == "completed" and any(c.state not in DONE for c in self.children):
            raise ValueError("a completed batch needs every child integrated or released")
        for cand in self.candidates:
            owner = self.child(cand.task_id)
            if owner is None or owner.state != "lane_committed":
                raise ValueError(f"the candidate of {cand.task_id} needs its child lane_committed")
        if len({c.task_id for c in self.candidates}) != len(self.candidates):
            raise ValueError("a child has two candidates")
        return self

    # -- helpers -------------------------------------------------------------------------

    def child(self, task_id: str) -> Child | None:
        return next((c for c in self.children if c.task_id == task_id), None)

    @property
    def terminal(self) -> bool:
        return self.batch_state in TERMINAL

    def commits(self) -> list[str]:
        """Integration commits in batch-branch order (derived, never stored)."""
        done = [c for c in self.children if c.state in DONE and c.commit]
        return [c.commit for c in sorted(done, key=lambda c: (c.settled_at or "", self.children.index(c)))]

    def referenced_commits(self) -> set[str]:
        """Objects the record keeps reachable: lane commits, executor commits, archived tips."""
        refs: set[str] = set()
        for c in self.children:
            if c.lane:
                if c.lane.lane_commit:
                    refs.add(c.lane.lane_commit)
                refs.update(c.lane.executor_commits)
            if c.commit:
                refs.add(c.commit)
        refs.update(a.tip for a in self.archived_lanes)
        refs.update(a.record_tip for a in self.archived_lanes if a.record_tip)
        return refs


class QaAttempt(_Model):
    at: str
    tree: Oid
    passed: bool
    results: list[CheckResultModel]
    author_ident: str | None = None
    note: str | None = None  # e.g. "checks changed the delivery: <paths>"


class GaveUp(_Model):
    at: str
    text: str


class Claim(_Model):
    """A lane created by `git lanes join` in another clone, offering itself to the coordinator (§14)."""
    at: str
    clone_id: str
    host: str
    run_id: str               # admission adopts it as the lane's run_id
    heartbeat_at: str | None = None


class Released(_Model):
    at: str


class LaneRecord(_V3Model):
    contract: Literal["git_lanes/lane_record/v1"] = LANE_RECORD
    batch_id: str
    task_id: str
    run_id: str
    record_revision: int = Field(0, ge=0)
    qa_attempts: list[QaAttempt] = []
    inbox_read: int = Field(0, ge=0)    # how many of this lane's interventions (oldest first) were read
    sessions: list[SessionEntry] = []   # (v4) the sessions run/work ran in it (SPEC §17.4)
    gave_up: GaveUp | None = None
    claim: Claim | None = None          # a lane of another clone (SPEC §14)
    released: Released | None = None    # that lane was released in its clone (its last revision)


class Report(BaseModel):
    """The `--json` report (SPEC §16); optional lists appear only when non-empty."""
    model_config = ConfigDict(extra="forbid")

    contract: Literal["git_lanes/batch_report/v1"] = BATCH_REPORT
    batch_id: str | None
    slug: str
    batch_state: str
    max_parallel: int | None
    children: list[dict[str, Any]]
    commits: list[str]
    reason: str | None
    handoffs: list[dict[str, Any]]
    next_action: str
    created_at: str
    lane_refusals: list[dict[str, Any]] = []
    tracker_observations: list[dict[str, Any]] = []
    restores: list[dict[str, Any]] = []
    final_verification: dict[str, Any] | None = None
    interventions: list[dict[str, Any]] = []
    lane_instruction: dict[str, Any] | None = None
    lane_revision: dict[str, Any] | None = None
    revisions: list[dict[str, Any]] = []
    reseals: list[dict[str, Any]] = []
    adopted_heads: list[dict[str, Any]] = []
    reviews: list[dict[str, Any]] = []
    candidate: dict[str, Any] | None = None
    candidates: list[dict[str, Any]] = []
    usage: dict[str, Any] | None = None   # (v4) usage totals, per child and of the batch (SPEC §17.4)
    driver: dict[str, Any] | None = None  # (v4) the live `git lanes run` that drives the slug (SPEC §17.1)

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for key in ("lane_refusals", "tracker_observations", "restores", "final_verification", "interventions",
                    "lane_instruction", "lane_revision", "revisions", "reseals", "adopted_heads", "reviews",
                    "candidate", "candidates", "usage", "driver"):
            if not data.get(key):
                data.pop(key, None)
        return data


def contracts_manifest() -> dict[str, str]:
    return {"contract": CONTRACTS, "batch_record": BATCH_RECORD, "lane_record": LANE_RECORD,
            "batch_report": BATCH_REPORT, "store_layout": STORE_LAYOUT, "receipt": RECEIPT}


def schemas() -> dict[str, Any]:
    return {"batch_record": BatchRecord.model_json_schema(by_alias=True),
            "lane_record": LaneRecord.model_json_schema(),
            "batch_report": Report.model_json_schema()}
