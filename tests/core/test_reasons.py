"""The reason-code list cannot go stale: every code the code base uses is in reasons.py."""

from __future__ import annotations

import re

from ergonomics_helpers import REPO_ROOT

from git_lanes.core import reasons

PACKAGE = REPO_ROOT / "git_lanes"

# The shapes a reason code takes in the code base.
PATTERNS = [
    re.compile(r'\brefused\(\s*(?:[^"()]*?\belse\s+)?"([a-z][a-z0-9_]*)"'),   # refused("code", ...)
    re.compile(r'\b_?reject\(\s*"([a-z][a-z0-9_]*)"'),                         # tick guards
    re.compile(r'\bPark\(\s*f?"([a-z][a-z0-9_]*)'),                            # Park(f"code: ...")
    re.compile(r'\bpark\([^,()]+,\s*f?"([a-z][a-z0-9_]*)'),                     # self.park(child, "code")
    re.compile(r'\bf?"([a-z]+(?:_[a-z0-9]+)+): '),                              # "code: detail" literals
    re.compile(r'\breturn\s+"((?:batch|stale)_[a-z0-9_]+)"'),                   # decisions returning a code
]


def used_codes() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in {"reasons.py", "manpage.py", "completion.py"}:
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in PATTERNS:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.setdefault(match.group(1), f"{path.relative_to(REPO_ROOT)}:{line}")
    return found


def test_the_scan_sees_the_known_shapes():
    codes = used_codes()
    for code in ("batch_busy", "batch_lane_dirty", "batch_parallel_mismatch", "batch_lane_lost",
                 "batch_integration_conflict", "plan_changed", "correction_due", "batch_confirmation_required"):
        assert code in codes, code


def test_every_code_used_is_listed():
    missing = {code: where for code, where in used_codes().items() if code not in reasons.REASONS}
    assert not missing, ("reason codes used but not listed in git_lanes/core/reasons.py "
                         f"(add them, then run python -m git_lanes.cli.manpage): {missing}")


def test_every_spec_code_is_listed():
    spec = ["batch_not_toplevel", "batch_index_flags", "dirty_working_tree", "batch_head_unborn",
            "batch_branch_exists", "batch_already_active", "batch_child_critical", "stale_lanes",
            "batch_runtime_contract_mismatch", "batch_confirmation_required", "batch_confirmation_declined",
            "batch_lane_unknown_child", "batch_lane_foreign_repository", "batch_lane_is_coordinator",
            "batch_lane_branch_mismatch", "batch_lane_base_mismatch", "batch_lane_dirty", "batch_lane_occupied",
            "batch_parallel_mismatch", "batch_coordinator_off_branch", "batch_needs_human", "batch_lane_lost",
            "batch_lane_run_mismatch", "batch_lane_stopped", "batch_lane_contract_mismatch",
            "batch_correction_limit_reached", "batch_integration_conflict", "batch_integration_check_failed",
            "batch_head_lineage_broken", "dirty_outside_scope", "plan_changed", "working_tree_unstaged",
            "batch_busy", "batch_lane_instruction_refused", "batch_revision_refused", "stale_batch_in_flight",
            "stale_batch_absent"]
    assert [c for c in spec if c not in reasons.REASONS] == []


def test_codes_are_well_formed_and_unique():
    seen = [code for _, group in reasons.GROUPS for code in group]
    assert len(seen) == len(set(seen))
    for code, meaning in reasons.REASONS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", code), code
        assert meaning and "\n" not in meaning, code


def test_tracker_statuses_match_the_tracker():
    from git_lanes import tracker

    constants = {v for k, v in vars(tracker).items() if k.isupper() and isinstance(v, str)
                 and re.fullmatch(r"[a-z_]+", v)}
    assert constants <= set(reasons.TRACKER_STATUSES)


def test_meaning_of_a_park_reason():
    assert reasons.meaning("dirty_outside_scope: src/x") == reasons.REASONS["dirty_outside_scope"]
    assert reasons.meaning("no child can start") is None
