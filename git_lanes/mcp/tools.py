"""The tools (SPEC §17.3): each one a command's options as typed arguments, and the use case that command's
click function in `cli/` calls, with the same arguments. What a tool returns is the command's `--json`
document; a list document (`log`, `inbox`) comes wrapped in one key, as MCP's structured content is an
object (the text content is the document itself)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .calls import Call, outcome_doc, qa_refusal

REPORT = "batch_report"   # `git lanes schema batch_report`


class Tool(NamedTuple):
    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    run: Callable[[Call, dict[str, Any]], Any]
    output: str | None = None       # the name of a `git lanes schema` document
    wrap: str | None = None         # a list document's key in the structured content
    lane: bool = False              # a lane-side tool
    long: bool = False              # runs checks: progress notifications, cancellable


def _s(description: str, **kw) -> dict[str, Any]:
    return {"type": "string", "description": description, **kw}


def _b(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description, "default": False}


def _n(description: str, default: int | None = None) -> dict[str, Any]:
    doc = {"type": "integer", "minimum": 1, "description": description}
    return {**doc, "default": default} if default is not None else doc


def _list(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "minLength": 1}, "description": description}


SLUG = _s("The initiative (default: as the CLI chooses it: the current branch's, the only active batch, ...).",
          minLength=1)
TASK = _s("The task id.", minLength=1)
BUDGETS = {"budget_usd": {"type": "number", "minimum": 0, "description": "The batch's cost budget in USD."},
           "budget_tokens": {"type": "integer", "minimum": 0, "description": "The batch's token budget."}}
YES = _b("Confirm (honoured only without elicitation, by a server started with --allow-yes).")


def _path(value: str | None, name: str) -> str | None:
    """A path argument as the CLI's PATH type takes it: not empty, no control character."""
    from ..core.errors import usage
    from ..core.ids import has_control

    if value is not None and (not value or has_control(value)):
        raise usage(f"invalid {name}: must not be empty or contain a control character")
    return value


# -- coordinator tools ----------------------------------------------------------------------------------

def plan(c: Call, a):
    from ..batch.status import plan_view
    from ..core.ids import check_id

    check_id(a["slug"], "slug")
    doc, _title, differs, _risks = plan_view(c.session(), a["slug"], a.get("max_parallel", 1))
    if differs:
        c.warnings.append(f"the working tree differs from HEAD under .lanes/{a['slug']}/; the plan shown is HEAD's")
    return doc


def start(c: Call, a):
    from ..batch.start import StartOptions, start_batch

    yes = a.get("yes", False)
    opts = StartOptions(max_parallel=a.get("max_parallel", 1), max_children=a.get("max_children"),
                        qa_failure_limit=a.get("qa_failure_limit", 2), final_checks=a.get("final_checks") or None,
                        delegate_revisions=a.get("delegate_revisions", False),
                        executor_runtime=_path(a.get("executor_runtime"), "executor_runtime"),
                        worktree=_path(a.get("worktree"), "worktree"), yes=yes, budget_usd=a.get("budget_usd"),
                        budget_tokens=a.get("budget_tokens"))
    return outcome_doc(start_batch(c.session(), a["slug"], opts, c.confirm_fn(yes)))


def status(c: Call, a):
    from ..batch import status as views

    s = c.session()
    return views.status(s, s.choose_slug(a.get("slug")))


def tick(c: Call, a):
    from ..decisions.instruction import parse_instruction
    from ..tick import Request, parse_offers, run_tick

    s = c.session()
    slug = s.choose_slug(a.get("slug"))
    offers = parse_offers(list(a.get("offers", [])), c.cwd)
    instruction = parse_instruction(a["instruct"]) if a.get("instruct") is not None else None
    return outcome_doc(run_tick(s, slug, Request(offers=offers, instruction=instruction,
                                                 max_parallel=a.get("max_parallel"))))


def provision(c: Call, a):
    from ..batch.steward import provision as provision_fn

    s = c.session()
    return outcome_doc(provision_fn(s, s.choose_slug(a.get("slug")), a["task"], _path(a.get("path"), "path")))


def instruct(c: Call, a):
    from ..decisions.instruction import parse_instruction
    from ..tick import Request, run_tick

    req = parse_instruction({"task_id": a["task"], "kind": a.get("kind", "instruction"), "text": a["message"],
                             "session_state": a["session_state"]},
                            {"text": "message", "kind": "kind", "session_state": "session_state"})
    s = c.session()
    return outcome_doc(run_tick(s, s.choose_slug(a.get("slug")), Request(instruction=req, actor="instruct")))


def review(c: Call, a):
    from ..batch.status import check_tasks
    from ..core.ids import check_id
    from ..tick import Request, run_tick

    check_id(a["task"], "task id")
    s = c.session()
    slug = s.choose_slug(a.get("slug"))
    check_tasks(s, slug, [a["task"]])
    return outcome_doc(run_tick(s, slug, Request(review=(a["task"], a["verdict"], a.get("message")),
                                                 actor="review")))


def revise(c: Call, a):
    from dataclasses import replace

    from ..batch.status import check_tasks
    from ..core.ids import check_id
    from ..domain.revise import ask_first, read_request
    from ..tick import Request, run_tick

    check_id(a["task"], "task id")
    s = c.session()
    slug = s.choose_slug(a.get("slug"))
    check_tasks(s, slug, [a["task"]])
    confirm = c.confirm_fn(a.get("yes", False))
    req = read_request(a["task"], _path(a["intent"], "intent"), interactive=True, confirm=lambda text: bool(confirm(text)))
    req = ask_first(s, slug, req)
    if c.confirmed_by is not None:
        req = replace(req, confirmed_by=(c.confirmed_by["actor"], c.confirmed_by["confirmation_ref"]))
    return outcome_doc(run_tick(s, slug, Request(revision=req, actor="revise")))


def resume(c: Call, a):
    from ..batch.resume import resume_batch

    return outcome_doc(resume_batch(c.session(), a["slug"], list(a.get("restart", [])), a.get("delegate_revisions"),
                                    c.confirm_fn(a.get("yes", False)), list(a.get("tasks", [])),
                                    (a.get("budget_usd"), a.get("budget_tokens"))))


def integrate(c: Call, a):
    from ..batch.status import check_tasks
    from ..tick import INTEGRATE, Request, run_tick

    s = c.session()
    slug = s.choose_slug(a.get("slug"))
    tasks = list(a.get("tasks", []))
    check_tasks(s, slug, tasks)
    request = Request(only=set(tasks) if tasks else None, actor="integrate", closes_issues=False)
    return outcome_doc(run_tick(s, slug, request, steps=INTEGRATE))


def verify(c: Call, a):
    from ..batch.verify import verify as verify_fn
    from ..core.errors import refused
    from ..domain.checks import failed_summary

    s = c.session()
    doc = verify_fn(s, s.choose_slug(a.get("slug")), a.get("commit"))
    if not doc["passed"]:
        raise refused("verification_failed", f"{failed_summary(doc['results'], None)} at {doc['head']}", report=doc)
    return doc


def diff(c: Call, a):
    from ..batch.diffview import diff_view

    s = c.session()
    return diff_view(s, s.choose_slug(a.get("slug")), a["task"])


def show(c: Call, a):
    from ..batch import status as views

    s = c.session()
    return views.show(s, s.choose_slug(a.get("slug")), a["task"])


def log(c: Call, a):
    from ..batch import status as views

    s = c.session()
    return views.audit_trail(s, s.choose_slug(a.get("slug")))


def audit(c: Call, a):
    from ..batch.audit import audit as audit_fn
    from ..core.errors import refused

    findings = audit_fn(c.session(), a.get("slug"))
    if findings:
        raise refused("audit_findings", f"{len(findings)} finding(s)", report={"findings": findings})
    return {"findings": findings}


def receipts(c: Call, a):
    from ..domain.receipts import receipts_view

    return receipts_view(c.session(), a.get("prune"))


def release(c: Call, a):
    from ..batch.steward import release_stale
    from ..core.errors import usage
    from ..remote.claims import release as release_fn

    s = c.session()
    if a.get("stale"):
        return release_stale(s, s.choose_slug(a.get("slug") or a.get("task")))
    if a.get("task") is None:
        raise usage("name the task to release (or use stale)")
    return release_fn(s, s.choose_slug(a.get("slug")), a["task"], keep_branch=a.get("keep_branch", False),
                      remote=a.get("remote", "origin"))


# -- lane-side tools ------------------------------------------------------------------------------------

def task(c: Call, a):
    from ..lane.side import task_info

    return task_info(c.session(lane_side=True))


def done(c: Call, a):
    from ..lane.side import done as done_fn

    from ..batch.metering import parse_usage
    from ..core.errors import usage

    reported = parse_usage(a["usage"]) if a.get("usage") is not None else None
    if isinstance(reported, str):
        raise usage(f"invalid usage: {reported}")
    doc = done_fn(c.session(lane_side=True), cancelled=c.cancelled.is_set, usage=reported or None)
    if doc is None:
        raise KeyboardInterrupt
    if not doc["passed"]:
        raise qa_refusal(doc)
    return doc


def give_up(c: Call, a):
    from ..lane.side import give_up as give_up_fn

    return give_up_fn(c.session(lane_side=True), a["message"])


def inbox(c: Call, a):
    from ..lane.side import inbox as inbox_fn

    return inbox_fn(c.session(lane_side=True), ack=a.get("ack", False))


TOOLS: tuple[Tool, ...] = (
    Tool("plan", "Show an initiative's plan (read from HEAD): digest, waves, scope conflicts.",
         {"slug": _s("The initiative.", minLength=1), "max_parallel": _n("Pack waves at most this wide.", 1)},
         ("slug",), plan),
    Tool("start", "Authorize and start a batch of an initiative on imm/<slug>, then tick. Needs a confirmation.",
         {"slug": _s("The initiative.", minLength=1), "max_parallel": _n("Lanes running at once.", 1),
          "max_children": _n("Children that may ever get a lane (default: every task)."),
          "qa_failure_limit": _n("Failed attempts before a design-level correction is due.", 2),
          "final_checks": _list("Final check commands (default: the initiative's final_checks)."),
          "delegate_revisions": _b("Grant the coordinator approval of breaking revisions inside the envelope."),
          "executor_runtime": _s("A contract manifest or git-lanes installation the lanes will run."),
          "worktree": _s("Create the coordinator as a new worktree at this folder."), **BUDGETS, "yes": YES},
         ("slug",), start, REPORT, long=True),
    Tool("status", "The report of the latest batch, from the stored record (never writes).", {"slug": SLUG}, (),
         status, REPORT),
    Tool("tick", "Reconcile once: observe lanes, integrate, admit offers, hand off.",
         {"slug": SLUG, "offers": _list("Lane offers, each TASK=PATH."),
          "instruct": {"type": "object", "description": "{task_id, kind, text, session_state}"},
          "max_parallel": _n("Assert the recorded max_parallel.")}, (), tick, REPORT, long=True),
    Tool("provision", "Create the lane a provision handoff names, then tick with the offer.",
         {"task": TASK, "slug": SLUG, "path": _s("Where the lane worktree goes.")}, ("task",), provision, REPORT,
         long=True),
    Tool("instruct", "Send an instruction or correction to an idle lane session (a tick carrying it).",
         {"task": TASK, "slug": SLUG, "message": _s("The text."),
          "kind": {"type": "string", "enum": ["instruction", "correction"], "default": "instruction"},
          "session_state": {"type": "string", "enum": ["idle", "working", "blocked", "done"],
                            "description": "The lane session's state as you observed it."}},
         ("task", "message", "session_state"), instruct, REPORT, long=True),
    Tool("review", "Give a review verdict on a lane whose intent asks for one.",
         {"task": TASK, "slug": SLUG, "verdict": {"type": "string", "enum": ["approve", "reject"]},
          "message": _s("The verdict's text (a rejection's goes to the lane's inbox).")},
         ("task", "verdict"), review, REPORT, long=True),
    Tool("revise", "Propose a revised intent for an enrolled child (a tick carrying it).",
         {"task": TASK, "slug": SLUG, "intent": _s("The revised intent TOML file.", minLength=1), "yes": YES},
         ("task", "intent"), revise, REPORT, long=True),
    Tool("resume", "Free parked children (all of a needs_human batch, after a confirmation; or the tasks named "
                   "on a running batch); then tick.",
         {"slug": _s("The initiative.", minLength=1), "tasks": _list("Parked children to free."),
          "restart": _list("Parked children to send back to pending."), "yes": YES, **BUDGETS,
          "delegate_revisions": {"type": ["boolean", "null"], "default": None,
                                 "description": "Grant (true) or withdraw (false) revision delegation."}},
         ("slug",), resume, REPORT, long=True),
    Tool("integrate", "Integrate settled lanes (the tick's own steps); admits and schedules nothing.",
         {"slug": SLUG, "tasks": _list("Only these tasks.")}, (), integrate, REPORT, long=True),
    Tool("verify", "Run the final checks on the batch head (or one task's checks on its commit); never writes.",
         {"slug": SLUG, "commit": _s("Run the acceptance checks of the task this commit integrated, on it.",
                                     minLength=1)}, (), verify, long=True),
    Tool("diff", "A child's change against its lane base (its lane commit, last attempt, or lane).",
         {"task": TASK, "slug": SLUG}, ("task",), diff),
    Tool("show", "One child with its lane record.", {"task": TASK, "slug": SLUG}, ("task",), show),
    Tool("log", "The audit trail: one entry per state write, oldest first.", {"slug": SLUG}, (), log,
         wrap="entries"),
    Tool("audit", "Check every imm-lane/* branch against the records; a finding is a refusal (audit_findings).",
         {"slug": SLUG}, (), audit),
    Tool("release", "Remove a lane that a release handoff names (or, with stale, lanes of finished batches).",
         {"task": TASK, "slug": SLUG, "keep_branch": _b("Keep the lane branch."),
          "stale": _b("Remove clean lanes of terminal batches."),
          "remote": _s("Where the release of a lane joined in this clone is pushed.", minLength=1,
                       default="origin")}, (), release),
    Tool("receipts", "This clone's receipts (key, check, task, where, tree, age); prune drops those older than "
                     "that many days.",
         {"prune": {"type": "number", "minimum": 0, "description": "Drop receipts older than this many days."}},
         (), receipts),
    Tool("task", "(In a lane) the effective intent, its checks and unread instructions.", {}, (), task, lane=True),
    Tool("done", "(In a lane) snapshot the delivery, run the acceptance checks, record the attempt; a failed "
                 "attempt is a refusal (qa_failed) carrying the attempt.",
         {"usage": {"type": "object", "description": "What this session used (recorded with the attempt).",
                    "properties": {k: {"type": "number", "minimum": 0}
                                   for k in ("input_tokens", "output_tokens", "cost_usd")},
                    "additionalProperties": False}}, (), done, lane=True, long=True),
    Tool("give_up", "(In a lane) the executor cannot finish; the coordinator parks the child.",
         {"message": _s("Why.", minLength=1)}, ("message",), give_up, lane=True),
    Tool("inbox", "(In a lane) instructions and corrections for this lane, oldest first.",
         {"ack": _b("Record everything shown as read.")}, (), inbox, wrap="items", lane=True),
)


def input_schema(tool: Tool) -> dict[str, Any]:
    return {"type": "object", "properties": tool.properties, "required": list(tool.required),
            "additionalProperties": False}


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The command's document's JSON Schema (`git lanes schema`), where there is one."""
    if tool.output is None:
        return None
    from ..core.model import schemas

    return schemas()[tool.output]
