"""`git lanes start`: preflight, confirmation, the record first, then the branch, then a tick."""

from __future__ import annotations

import os
import secrets
import shlex
from dataclasses import dataclass, field
from typing import Callable

from ..core.crash import crash_point
from ..core.errors import LanesError, refused, usage
from ..core.ids import MAX_FINAL_CHECKS, check_id, final_check_problem, require_utf8
from ..core.model import CARRIED_OVER, BatchRecord, Budget, Child, IntentIdentity, Lane, RevisionDelegation
from ..core.model4 import ConfirmedBy
from ..domain.runtime import runtime_mismatch
from ..domain.session import LANE_PREFIX, Session, batch_branch
from ..gitio import BatchBranch, LaneBranch, branch_ref, quote_path, short_branch
from ..plan.initiative import Plan


@dataclass
class StartOptions:
    max_parallel: int = 1
    max_children: int | None = None
    qa_failure_limit: int = 2
    final_checks: list[str] | None = None
    delegate_revisions: bool = False
    executor_runtime: str | None = None
    worktree: str | None = None
    yes: bool = False
    receipts: bool = True          # (v4) false: `--no-receipts`, recorded as `receipts: false` (§8.7)
    verify_window: int | None = None   # (v4) candidates verified at once (None: `verify_window()` decides)
    budget_usd: float | None = None      # (v4) SPEC §17.4
    budget_tokens: int | None = None


@dataclass
class Prepared:
    """Everything the confirmation shows, computed before anything is written."""
    slug: str
    plan: Plan
    head: str
    coordinator: str
    final_checks: list[str]
    opts: StartOptions
    carried: dict[str, str] = field(default_factory=dict)   # task -> commit already on imm/<slug>
    continues: bool = False


def batch_id_for(slug: str, at: str) -> str:
    stamp = at[:19].replace("-", "").replace(":", "") + "Z"   # yyyymmddThhmmssZ
    return f"{slug}-{stamp}-{secrets.token_hex(3)}"


def _validate_options(o: StartOptions, plan: Plan) -> list[str]:
    if o.max_parallel < 1:
        raise usage("--max-parallel: must be at least 1")
    if o.max_children is not None and o.max_children < 1:
        raise usage("--max-children: must be at least 1")
    if o.qa_failure_limit < 1:
        raise usage("--qa-failure-limit: must be at least 1")
    checks = list(o.final_checks) if o.final_checks else list(plan.final_checks)
    if len(checks) > MAX_FINAL_CHECKS:
        raise usage(f"--final-check: at most {MAX_FINAL_CHECKS} final checks")
    for cmd in checks:
        problem = final_check_problem(cmd)
        if problem:
            raise usage(f"--final-check: {cmd!r}: {problem}")
    return checks


def verify_window(s: Session, o: StartOptions) -> int:
    """The batch's window of candidates (SPEC §8.9): `--verify-window`, else `lanes.verifyWindow`, else
    min(4, max_parallel)."""
    if o.verify_window is not None:
        if o.verify_window < 1:
            raise usage("--verify-window: must be at least 1")
        return o.verify_window
    configured = s.git.config_int("lanes.verifyWindow", 0) if s.git.config_get("lanes.verifyWindow") else None
    if configured is not None and configured < 1:
        raise usage(f"lanes.verifyWindow: must be at least 1 (it is {configured})")
    return configured or min(4, o.max_parallel)


def _dirty(git, dirty) -> Exception:
    """`dirty_working_tree`: tracked changes are committed or stashed; an untracked file (a `.env`) is
    ignored in this clone, never committed (SPEC §17.1 v4)."""
    def listed(entries) -> str:
        return ", ".join(quote_path(e.path) for e in entries[:5]) + (" …" if len(entries) > 5 else "")

    tracked = [e for e in dirty if e.xy != "??"]
    untracked = [e for e in dirty if e.xy == "??"]
    parts = ([f"commit or stash these first: {listed(tracked)}"] if tracked else []) + \
        ([f"untracked: {listed(untracked)}"] if untracked else [])
    hint = None
    if untracked:
        exclude = os.path.relpath(os.path.join(git.common_dir, "info", "exclude"), git.toplevel)
        names = " ".join(shlex.quote(e.path.rstrip("/")) for e in untracked[:5])
        hint = (f"ignore untracked files that are not part of the project in this clone only, e.g. "
                f"printf '%s\\n' {names} >> {shlex.quote(exclude)} (or remove them); do not commit them")
    return refused("dirty_working_tree", "; ".join(parts), hint=hint)


def prepare(s: Session, slug: str, o: StartOptions) -> Prepared:
    """Every preflight of SPEC §6, in order; nothing is written."""
    check_id(slug, "slug")
    git = s.git
    git.require_version()  # merge-tree --write-tree needs Git >= 2.38
    if git.toplevel is None:
        raise refused("batch_not_toplevel", "start needs a working tree (this is a bare repository or a .git directory)")
    if os.path.realpath(s.git.cwd) != os.path.realpath(git.toplevel) and o.worktree is None:
        raise refused("batch_not_toplevel", f"run start at the top level of the working tree ({git.toplevel})")
    head = git.rev_parse("HEAD")
    if head is None:
        raise refused("batch_head_unborn", "HEAD has no commit yet; commit the initiative first")
    plan = s.plan_at(head, slug)
    final_checks = _validate_options(o, plan)
    o.verify_window = verify_window(s, o)
    flagged = git.work.flagged()
    if flagged:
        raise refused("batch_index_flags", "assume-unchanged or skip-worktree entries hide changes: "
                                           + ", ".join(quote_path(p) for p in flagged[:5]))
    dirty = git.status()
    if dirty:
        raise _dirty(git, dirty)
    last = s.batches.read(slug)
    if last is not None and not last.record.terminal:
        raise refused("batch_already_active", f"batch {last.record.batch_id} of {slug} is {last.record.batch_state}; "
                                              "tick, resume or retire it", hint=f"git lanes tick {slug}")
    branch = batch_branch(slug)
    for prefix in _ref_prefixes(branch):
        if git.refs.resolve(branch_ref(prefix)) is not None:
            raise refused("batch_branch_exists", f"the branch {prefix} blocks {branch}")
    if git.refs.under(branch_ref(f"{branch}/")):
        raise refused("batch_branch_exists", f"branches under {branch}/ block {branch}")
    for prefix in _ref_prefixes(LaneBranch(slug, "x").name):   # imm-lane, imm-lane/<slug>: no lane could be made
        if git.refs.resolve(branch_ref(prefix)) is not None:
            raise refused("batch_branch_exists", f"the branch {prefix} blocks the lane branches {prefix}/…")
    continues = False
    carried: dict[str, str] = {}
    if git.refs.resolve(branch_ref(branch)) is not None:
        if last is None or last.record.terminal is False:
            raise refused("batch_branch_exists", f"{branch} exists and no finished batch of {slug} owns it",
                          hint=f"keep it under another name (git branch -m {branch} {slug}-before-lanes), "
                               "or start under another slug")
        current = s.current_branch()
        if current != branch_ref(branch) or o.worktree is not None:
            raise refused("batch_branch_exists", f"{branch} exists; to continue it, run start in the worktree "
                                                 f"that has it checked out")
        continues = True
        carried = _carry_over(s, last.record, plan, head)
    if any(t.intent.risk == "critical" for t in plan.tasks):
        crit = next(t.task_id for t in plan.tasks if t.intent.risk == "critical")
        raise refused("batch_child_critical", f"{crit} is risk = \"critical\"; critical tasks are never batched")
    stale = [short_branch(name) for name in git.refs.under(LANE_PREFIX + slug + "/")]
    if stale:
        raise refused("stale_lanes", ", ".join(sorted(stale)),
                      hint=f"git lanes release --stale {slug}" if last is not None else None)
    if o.executor_runtime:
        mismatch = runtime_mismatch(o.executor_runtime)
        if mismatch:
            raise refused("batch_runtime_contract_mismatch", mismatch)
    coordinator = new_directory(o.worktree, "--worktree") if o.worktree else os.path.realpath(git.toplevel)
    return Prepared(slug, plan, head, coordinator, final_checks, o, carried, continues)


def new_directory(path: str, option: str) -> str:
    """The absolute real path of a directory git-lanes is to create (`--worktree`, `demo DIR`):
    absent or an empty directory, below a folder this user can write; a usage error otherwise,
    before anything is written."""
    require_utf8(path, option)
    target = os.path.realpath(os.path.abspath(path))
    if os.path.lexists(target):
        if not os.path.isdir(target):
            raise usage(f"{option}: {path} exists and is not a directory")
        if os.listdir(target):
            raise usage(f"{option}: {path} exists and is not empty")
        if not os.access(target, os.W_OK | os.X_OK):
            raise usage(f"{option}: {path} is not writable")
        return target
    parent = os.path.dirname(target)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise usage(f"{option}: {path} cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise usage(f"{option}: {path} cannot be created: {parent} is not writable")
    return target


def _ref_prefixes(branch: str) -> list[str]:
    parts = branch.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _carry_over(s: Session, last: BatchRecord, plan: Plan, head: str) -> dict[str, str]:
    """Children of the new batch already integrated on the branch with an unchanged identity."""
    carried = {}
    for parsed in plan.tasks:
        ident = last.intent_identities.get(parsed.task_id)
        old = last.child(parsed.task_id)
        if ident is None or old is None or old.commit is None:
            continue
        if (ident.intent_revision, ident.intent_content_hash) != (parsed.intent.revision, parsed.content_hash):
            continue
        if s.git.odb.is_ancestor(old.commit, head):
            carried[parsed.task_id] = old.commit
    return carried


def confirmation_text(p: Prepared) -> str:
    o = p.opts
    lines = [f"Start a batch of {p.slug}: {p.plan.title}",
             f"  plan digest   {p.plan.digest}",
             f"  base          {p.head}",
             f"  branch        {batch_branch(p.slug)}" + (" (continued)" if p.continues else ""),
             f"  coordinator   {p.coordinator}",
             f"  max parallel  {o.max_parallel}" + (f", verify window {o.verify_window}" if o.verify_window
                                                      else ""),
             f"  budget        max_children {o.max_children or len(p.plan.tasks)}, "
             f"qa_failure_limit {o.qa_failure_limit}",
             "  final checks  " + (", ".join(p.final_checks) if p.final_checks else "(none)"),
             "  revision delegation " + ("GRANTED: breaking revisions inside the envelope are approved "
                                         "without asking" if o.delegate_revisions else "off"),
             "  waves:"]
    for i, wave in enumerate(p.plan.waves(o.max_parallel), 1):
        lines.append(f"    {i}. " + ", ".join(wave))
    material = [t.task_id for t in p.plan.tasks if t.intent.risk == "material"]
    if material:
        lines.append("  material risk: " + ", ".join(material))
    conflicts = p.plan.scope_conflicts()
    if conflicts:
        lines.append("  scope conflicts (never run together):")
        seen: set[str] = set()
        for c in conflicts:   # each pair once (SPEC §17.1 v4; the list names both directions)
            others = [o for o in c["overlaps_with"] if o not in seen]
            seen.add(c["task_id"])
            if others:
                lines.append(f"    {c['task_id']}: " + ", ".join(others))
    if p.carried:
        lines.append("  carried over (already on the branch): " + ", ".join(sorted(p.carried)))
    return "\n".join(lines)


def build_record(s: Session, p: Prepared) -> BatchRecord:
    from ..domain.lanehost import remote_timeout

    at = s.clock()
    children = []
    for parsed in p.plan.tasks:
        child = Child(task_id=parsed.task_id, blocked_by=list(parsed.intent.blocked_by))
        if parsed.task_id in p.carried:
            child = Child(task_id=parsed.task_id, blocked_by=list(parsed.intent.blocked_by), state="integrated",
                          commit=p.carried[parsed.task_id], lane=_carried_lane(p, parsed.task_id))
        children.append(child)
    return BatchRecord(
        batch_id=batch_id_for(p.slug, at), slug=p.slug, plan_digest=p.plan.digest, base_head=p.head,
        branch=batch_branch(p.slug), base_branch=_base_branch(s, p), coordinator=p.coordinator,
        confirmation_time=at,
        budget=Budget(max_children=p.opts.max_children or len(p.plan.tasks), qa_failure_limit=p.opts.qa_failure_limit,
                      max_cost_usd=p.opts.budget_usd, max_tokens=p.opts.budget_tokens),
        max_parallel=p.opts.max_parallel, verify_window=p.opts.verify_window, children=children,
        final_checks=p.final_checks,
        revision_delegation=RevisionDelegation(confirmation_time=at) if p.opts.delegate_revisions else None,
        intent_identities={t.task_id: IntentIdentity(**t.identity()) for t in p.plan.tasks},
        tracker_github=p.plan.tracker_github, receipts=None if p.opts.receipts else False,
        remote_timeout=remote_timeout(s.git), created_at=at, updated_at=at)


def _base_branch(s: Session, p: Prepared) -> str | None:
    """(v3) The branch start ran from, where the batch lands (a continued batch keeps its predecessor's)."""
    if p.continues:
        last = s.batches.read(p.slug)
        return last.record.base_branch if last else None
    return short_branch(s.current_branch())


def _carried_lane(p: Prepared, task_id: str) -> Lane:
    commit = p.carried[task_id]
    return Lane(path="", branch=LaneBranch(p.slug, task_id).name, base_head=commit, run_id=CARRIED_OVER,
                lane_commit=commit)


def start(s: Session, slug: str, o: StartOptions, confirm: Callable[[str], bool]) -> BatchRecord:
    """Preflight, confirm, write the record, create and check out the branch (no tick)."""
    check_id(slug, "slug")
    with s.transaction(slug, "start") as tx:
        p = prepare(s, slug, o)
        from ..domain.workspace import environment_gap, setup_command

        setup_command(s)   # shell syntax in lanes.setupCommand: exit 2 before anything is written (SPEC §2 v3)
        gap = environment_gap(s, p.coordinator)
        if gap:
            s.warn(gap)
        answer = confirm(confirmation_text(p))
        if not answer:
            raise refused("batch_confirmation_declined", "nothing was written")
        record = build_record(s, p)
        if isinstance(answer, dict):   # an MCP client's confirmation says whose it was (SPEC §17.6)
            record.confirmed_by = ConfirmedBy(**answer)
        before = tx.snap.commit if tx.snap else None
        written = tx.write(f"batch {record.batch_id} started", record=record, new_line=True, stamp=False).commit
    crash_point("record-written")
    git = s.git
    branch = BatchBranch(slug)
    if not p.continues:
        git.refs.create(branch.ref, p.head, f"git-lanes: start {record.batch_id}")
    crash_point("branch-created")
    if o.worktree:
        existed = os.path.isdir(p.coordinator)
        try:
            git.work.add(p.coordinator, branch.name)
        except LanesError:   # Git could not create it: nothing of this start stays (record, branch, folder)
            updates = [(s.batches.ref(slug), before, written)] + ([] if p.continues else [(branch.ref, None, p.head)])
            git.refs.update(updates, f"git-lanes: start {record.batch_id} undone")
            if not existed and os.path.isdir(p.coordinator) and not os.listdir(p.coordinator):
                os.rmdir(p.coordinator)
            raise
    elif not p.continues:
        git.work.switch(None, branch.name)
    return record


def start_batch(s: Session, slug: str, o: StartOptions, confirm: Callable[[str], bool]):
    """`git lanes start`: start, then the first tick (from the coordinator)."""
    from ..tick import Request, run_tick

    record = start(s, slug, o, confirm)
    return run_tick(Session(cwd=record.coordinator, warn=s.warn, clock=s.clock), slug, Request(actor="start"))
