"""Every stable reason code git-lanes prints, with a one-line meaning (SPEC §16).

A reason code is public interface: scripts and agents match on it. It appears as
`error: <code>: <detail>` on stderr (exit 1), as a child's or the batch's `reason`
(`<code>: <detail>` for a park), in `lane_refusals[].reason`, `lane_instruction.reason`
and `lane_revision.reason`. The man page's REASON CODES section is generated from this
module, and a test checks that every code the code base uses is listed here.

Only the standard library is imported: the man page generator and the tests read it.
"""

from __future__ import annotations

# (section title, {code: meaning}); the order is the man page's.
GROUPS: list[tuple[str, dict[str, str]]] = [
    ("Start refusals (git lanes start, run)", {
        "batch_not_toplevel": "start did not run at the top of a worktree (or ran in a bare repository)",
        "batch_index_flags": "the index has assume-unchanged or skip-worktree entries",
        "dirty_working_tree": "the working tree has changes, untracked files included",
        "batch_head_unborn": "HEAD has no commit yet",
        "batch_branch_exists": "imm/<slug> (or a ref that clashes with it) exists and cannot be continued here",
        "batch_already_active": "the slug already has a batch that is not terminal",
        "batch_child_critical": "a task has risk = \"critical\"; critical tasks are never batched",
        "stale_lanes": "lane branches of an earlier batch of the slug were never released",
        "batch_runtime_contract_mismatch": "--executor-runtime names a runtime whose contracts differ from ours",
        "batch_confirmation_required": "no terminal to confirm on and no --yes",
        "batch_confirmation_declined": "the confirmation was answered no",
    }),
    ("Tick guards (the tick is rejected and writes nothing)", {
        "batch_parallel_mismatch": "--max-parallel differs from the recorded value",
        "batch_coordinator_off_branch": "the coordinator worktree is missing or not on imm/<slug>",
        "batch_needs_human": "an offer, instruction, revision or verdict was sent to a needs_human batch",
        "batch_busy": "another command held the slug's lock past lanes.lockTimeout, or the record "
                      "moved under a write",
        "working_tree_unstaged": "the coordinator has changes that cannot be proven to be a lane's writes",
    }),
    ("Lane admission (lane_refusals[].reason, first failing check wins)", {
        "batch_lane_unknown_child": "the offered task is not in the batch, not pending or not startable now",
        "batch_lane_foreign_repository": "the path is missing, not a worktree root, or of another repository",
        "batch_lane_is_coordinator": "the path is the coordinator worktree",
        "batch_lane_branch_mismatch": "the lane's HEAD is not on imm-lane/<slug>/<task>",
        "batch_lane_base_mismatch": "the lane's HEAD is not a batch commit holding all its blockers' integrations",
        "batch_lane_dirty": "the lane worktree has changes or untracked files",
        "batch_lane_occupied": "the path is already the lane of another child",
    }),
    ("Park reasons (a child becomes needs_human; the reason is <code>: <detail>)", {
        "batch_lane_lost": "the lane is gone, off its branch, or its record cannot be read",
        "batch_lane_run_mismatch": "the lane record's run_id differs from the batch record's",
        "batch_lane_stopped": "the executor gave up (git lanes done --give-up -m TEXT)",
        "batch_lane_contract_mismatch": "the lane record is of a contract this build cannot read",
        "batch_correction_limit_reached": "QA failures reached the limit after two coordinator corrections",
        "batch_integration_conflict": "the lane commit does not apply cleanly onto the batch head, "
                                      "or the candidate does not carry its change",
        "batch_integration_check_failed": "acceptance checks failed on the integration candidate",
        "batch_integration_setup_failed": "lanes.setupCommand failed in the scratch worktree of the candidate's reruns",
        "batch_head_lineage_broken": "the batch branch no longer descends from what the record says "
                                     "(the batch fails)",
        "dirty_outside_scope": "the delivery changes paths outside the task's scope",
        "plan_changed": "the plan at the batch head differs from the authorized plan",
        "budget_reached": "the batch's reported usage reached --budget-usd or --budget-tokens "
                          "(<kind> <total> of <budget>); resume --budget-usd/--budget-tokens raises it",
    }),
    ("Requests (instruct, revise, review)", {
        "batch_lane_instruction_refused": "an instruction or correction was refused; nothing is recorded",
        "batch_revision_refused": "a revision was refused (outside the envelope or not confirmed); "
                                  "nothing changes",
        "batch_review_not_open": "a review verdict was given for a child with no open review",
    }),
    ("Lane side (git lanes done, run in a lane)", {
        "correction_due": "the lane waits for the coordinator's design-level correction",
        "nothing_to_deliver": "the delivery is empty: nothing differs from the lane base",
        "nothing_changed": "the delivery is the very tree whose last attempt failed, and no instruction, "
                           "correction, resume or approved revision came since (done --retry runs the checks "
                           "again anyway)",
        "qa_failed": "the attempt failed: the failing check ids, or the attempt's note",
        "delivery_outside_scope": "the note of an attempt whose delivery changes paths outside the task's "
                                  "scope (failed before any check ran)",
    }),
    ("Steward (git lanes provision, release)", {
        "batch_lane_branch_exists": "the lane branch to provision already exists",
        "batch_lane_setup_failed": "lanes.setupCommand failed in a new lane: <exit status>: <the first two lines "
                                   "naming an error, then the last three>; whole output: <log>; the lane was removed",
        "batch_lane_release_refused": "the lane has no release handoff (or --stale on a batch still running)",
    }),
    ("Remote lanes (git lanes join, work, run --remote, push, pull; SPEC §14)", {
        "batch_lane_claimed": "another clone's claim on the task got to the remote first; join removed what it "
                              "had created",
        "batch_lane_not_enrolled": "the lane was joined in this clone but the coordinator has not admitted its "
                                   "claim yet; nothing is written",
        "remote_moved": "a ref diverged on the remote (someone else wrote it), or leases kept failing after "
                        "five re-pulls; nothing was overwritten",
    }),
    ("Resume (git lanes resume)", {
        "batch_not_parked": "the batch is finished, or (on a running batch) a named child is not parked",
        "batch_restart_refused": "--restart names a child that is not parked",
        "batch_resume_unrecoverable": "a parked child cannot be recovered from Git and is not named in "
                                      "--restart; nothing is written",
        "batch_confirmation_stale": "the new confirmation is not strictly newer than the recorded one",
    }),
    ("Verification (git lanes verify)", {
        "verification_failed": "a final check (with --commit, an acceptance check of that task) failed: the "
                               "failing check ids, and the commit checked",
    }),
    ("Audit (git lanes audit)", {
        "audit_findings": "audit found <n> finding(s) (exit 1)",
    }),
    ("Retire (git lanes retire)", {
        "stale_batch_in_flight": "the batch still has a child in flight",
        "stale_batch_absent": "the slug has no active batch",
    }),
]

# Every code, in man page order.
REASONS: dict[str, str] = {code: meaning for _, group in GROUPS for code, meaning in group.items()}

# Statuses of tracker_observations[].status (SPEC §11); they never change batch state.
TRACKER_STATUSES: dict[str, str] = {
    "updated": "the issue was closed by this command (marker comment posted first)",
    "already_current": "the issue is closed with our marker and reason completed",
    "retryable_failure": "rate limit, timeout or server error; retried on a later tick",
    "permanent_failure": "authentication, missing issue or token, or a rejected request; retried on a later tick",
    "ambiguous_remote_state": "closed without our marker, or two markers; never reopened or edited",
}

# Fixed reason texts that are not codes (the batch's or a child's `reason`).
REASON_TEXTS: dict[str, str] = {
    "dependency <task> parked": "a pending child skipped because a blocker parked (skipped_blocked)",
    "review reservation <task> open": "a passed attempt waits for git lanes review",
    "QA failure limit reached": "the correction_due text: a design-level correction is due",
    "a parked child needs a human decision": "the batch stopped as needs_human",
    "no child can start": "the batch stopped as needs_human: nothing in flight and nothing startable",
    "max_children budget exhausted (<n>)": "the batch stopped as budget_stopped",
    "terminal state already reached: <state>": "a tick on a terminal batch",
    "all enrollable children integrated; final verification did not pass: <commands>":
        "the batch completed but a final check failed",
}


def meaning(code: str) -> str | None:
    """The one-line meaning of `code` (a bare code or `<code>: <detail>`), if it is one."""
    return REASONS.get(code.split(":", 1)[0].strip())
