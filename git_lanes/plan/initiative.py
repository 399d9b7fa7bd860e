"""An initiative (SPEC §2, §3): `.lanes/<slug>/`, validated whole; identities, digest, waves,
conflicts. Pure: callers hand in file contents (read from a commit); nothing here touches Git.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError, field_validator

from ..core.canonical import canonical_digest
from ..core.errors import usage
from ..core.ids import ID_RE, MAX_FINAL_CHECKS, check_id, final_check_problem, id_problem
from ..decisions import schedule
from .intent import (DEFAULT_TIMEOUT_S, AcceptanceItem, Intent, ParsedIntent, _not_blank, _Strict, intent_doc_hash,
                     load_toml, parse_intent, validation_error)

INITIATIVE_FILE = "initiative.toml"
_GITHUB_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")

__all__ = ["ID_RE", "DEFAULT_TIMEOUT_S", "INITIATIVE_FILE", "MAX_FINAL_CHECKS", "AcceptanceItem", "Intent",
           "ParsedIntent", "Plan", "check_id", "final_check_problem", "intent_doc_hash", "load_plan", "parse_intent",
           "plan_digest"]


class _Tracker(_Strict):
    github: str

    @field_validator("github")
    @classmethod
    def _github(cls, value: str) -> str:
        if not _GITHUB_RE.fullmatch(value) or value.split("/")[1] in (".", ".."):
            raise ValueError(f"{value!r} is not of the form owner/repo")
        return value


class _Initiative(_Strict):
    title: str
    tasks: list[str]
    final_checks: list[str] = []
    tracker: _Tracker | None = None

    _blank = field_validator("title")(staticmethod(_not_blank))

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must list at least one task")
        seen: set[str] = set()
        for task_id in value:
            problem = id_problem(task_id, task=True)
            if problem:
                raise ValueError(problem)
            if task_id in seen:
                raise ValueError(f"{task_id!r} is listed twice")
            seen.add(task_id)
        return value

    @field_validator("final_checks")
    @classmethod
    def _final_checks(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_FINAL_CHECKS:
            raise ValueError(f"at most {MAX_FINAL_CHECKS} commands")
        for command in value:
            problem = final_check_problem(command)
            if problem:
                raise ValueError(problem)
        return value


def plan_digest(entries: Sequence[Mapping[str, Any]]) -> str:
    """Digest of the ordered `{blocked_by, intent_content_hash, intent_path, intent_revision,
    task_id}` entries; hash strings are taken as given."""
    return canonical_digest([dict(entry) for entry in entries])


@dataclass(frozen=True)
class Plan:
    """A validated initiative: its tasks in plan order (every blocker before its dependents)."""

    slug: str
    title: str
    tasks: list[ParsedIntent]
    final_checks: list[str]
    tracker_github: str | None

    def by_id(self, task_id: str) -> ParsedIntent | None:
        """The task with this id, or None (a dict look-up: a tick asks once per child)."""
        index = self.__dict__.get("_index")
        if index is None:
            index = {task.task_id: task for task in self.tasks}
            object.__setattr__(self, "_index", index)
        return index.get(task_id)

    def entries(self) -> list[dict[str, Any]]:
        """The plan-digest entries, in plan order."""
        return [task.entry() for task in self.tasks]

    @property
    def digest(self) -> str:
        return plan_digest(self.entries())

    def scopes(self) -> dict[str, list[str]]:
        """Task id -> declared scope."""
        return {task.task_id: list(task.intent.scope) for task in self.tasks}

    def waves(self, max_parallel: int) -> list[list[str]]:
        """The tasks packed into waves of at most `max_parallel` (SPEC §3)."""
        return schedule.waves([task.task_id for task in self.tasks],
                              {task.task_id: task.intent.blocked_by for task in self.tasks},
                              self.scopes(), max_parallel)

    def scope_conflicts(self) -> list[dict[str, Any]]:
        """`[{task_id, overlaps_with: [sorted ids]}]` for every task overlapping another."""
        scopes = self.scopes()
        conflicts = []
        for task_id, scope in scopes.items():
            others = sorted(other for other, other_scope in scopes.items()
                            if other != task_id and schedule.scopes_overlap(scope, other_scope))
            if others:
                conflicts.append({"task_id": task_id, "overlaps_with": others})
        return conflicts

    def to_json(self, max_parallel: int = 1) -> dict[str, Any]:
        """The `plan --json` document (SPEC §3)."""
        return {
            "slug": self.slug,
            "plan_digest": self.digest,
            "children": [{**task.entry(), "scope": list(task.intent.scope)} for task in self.tasks],
            "waves": self.waves(max_parallel),
            "scope_conflicts": self.scope_conflicts(),
        }


def _find_cycle(order: Sequence[str], blockers: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle as `[a, b, ..., a]` (a is blocked by b ...), or None.

    Peels off tasks whose blockers are all peeled; every task left then has a blocker left,
    so following blockers from the first one must come back round. Blockers must be known ids.
    """
    remaining = list(order)
    while True:
        left = set(remaining)
        peeled = [t for t in remaining if not any(b in left for b in blockers[t])]
        if not peeled:
            break
        remaining = [t for t in remaining if t not in peeled]
    if not remaining:
        return None
    left = set(remaining)
    path = [remaining[0]]
    while True:
        node = next(b for b in blockers[path[-1]] if b in left)
        if node in path:
            return path[path.index(node):] + [node]
        path.append(node)


def load_plan(slug: str, files: Mapping[str, bytes]) -> Plan:
    """Validate the initiative `.lanes/<slug>/` given its files (bare name -> bytes).

    Only `*.toml` files matter: `initiative.toml` plus one intent per listed task.
    """
    check_id(slug, "slug")
    folder = f".lanes/{slug}"
    initiative_path = f"{folder}/{INITIATIVE_FILE}"
    if INITIATIVE_FILE not in files:
        raise usage(f"no initiative {initiative_path}")
    try:
        initiative = _Initiative.model_validate(load_toml(initiative_path, files[INITIATIVE_FILE]))
    except ValidationError as exc:
        raise validation_error(initiative_path, exc) from None

    listed = set(initiative.tasks)
    for name in sorted(files):
        if name.endswith(".toml") and name != INITIATIVE_FILE and name[:-5] not in listed:
            raise usage(f"{initiative_path}: tasks: task file {folder}/{name} is not listed")
    tasks = []
    for task_id in initiative.tasks:
        name = f"{task_id}.toml"
        if name not in files:
            raise usage(f"{initiative_path}: tasks: no file {folder}/{name} for task {task_id!r}")
        tasks.append(parse_intent(f"{folder}/{name}", files[name]))

    position = {task_id: index for index, task_id in enumerate(initiative.tasks)}
    for task in tasks:
        for blocker in task.intent.blocked_by:
            if blocker not in position:
                raise usage(f"{task.path}: blocked_by: unknown task {blocker!r}")
    blockers = {task.task_id: task.intent.blocked_by for task in tasks}
    cycle = _find_cycle(initiative.tasks, blockers)
    if cycle:
        first = next(task for task in tasks if task.task_id == cycle[0])
        raise usage(f"{first.path}: blocked_by: dependency cycle {' -> '.join(cycle)}")
    for task in tasks:
        for blocker in task.intent.blocked_by:
            if position[blocker] > position[task.task_id]:
                raise usage(f"{task.path}: blocked_by: {blocker!r} is listed after "
                            f"{task.task_id!r} in tasks of {initiative_path}")

    return Plan(
        slug=slug,
        title=initiative.title,
        tasks=tasks,
        final_checks=list(initiative.final_checks),
        tracker_github=initiative.tracker.github if initiative.tracker else None,
    )
