"""Plan files (SPEC §2): parse and validate an initiative, identities, digest, waves, conflicts.

Pure: callers hand in file contents (read from a commit); nothing here touches Git or disk.
Every validation error is `usage("<file>: <field>: <reason>")`, one line.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from . import schedule
from .canonical import canonical_digest
from .errors import LanesError, usage

ID_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9_-])?$")
RESERVED_TASK_ID = "initiative"
INITIATIVE_FILE = "initiative.toml"
DEFAULT_TIMEOUT_S = 1800
MAX_FINAL_CHECKS = 8
MAX_FINAL_CHECK_LENGTH = 512

_GITHUB_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_SCOPE_FORBIDDEN = ("\\", "{", "}", "!")
_FINAL_CHECK_FORBIDDEN = frozenset("|&;<>`$(){}\"'\\")


def _id_problem(value: str, *, task: bool) -> str | None:
    """Why `value` is not a valid slug (or task id when `task`), or None."""
    if not ID_RE.fullmatch(value):
        return f"{value!r} is not a valid id (letters, digits, '.', '_', '-'; at most 128)"
    if ".." in value:
        return f"{value!r} must not contain '..'"
    if value.endswith(".lock"):
        return f"{value!r} must not end in '.lock'"
    if task and value == RESERVED_TASK_ID:
        return f"{value!r} is reserved"
    return None


def check_id(value: str, what: str) -> None:
    """Raise a usage error unless `value` is a valid `what` ("slug" or "task id").

    The id `initiative` is refused when `what` is "task id".
    """
    problem = _id_problem(value, task=what == "task id")
    if problem:
        raise usage(f"invalid {what}: {problem}")


def _path_problem(entry: str) -> str | None:
    """Why `entry` is not a clean repo-relative path, or None."""
    if not entry.strip():
        return "must not be empty"
    if entry.startswith("/"):
        return f"{entry!r} must not be absolute"
    if any(segment in (".", "..") for segment in entry.split("/")):
        return f"{entry!r} must not contain a '.' or '..' segment"
    return None


def _scope_entry_problem(entry: str) -> str | None:
    """Why `entry` is not a valid scope entry, or None."""
    for char in _SCOPE_FORBIDDEN:
        if char in entry:
            return f"{entry!r} must not contain {char!r}"
    return _path_problem(entry)


def final_check_problem(command: str) -> str | None:
    """Why `command` is not an acceptable final check (SPEC §2.1), or None."""
    if not command.split():
        return "must not be empty"
    if "\n" in command or "\r" in command:
        return "must be one line"
    if len(command) > MAX_FINAL_CHECK_LENGTH:
        return f"longer than {MAX_FINAL_CHECK_LENGTH} characters"
    bad = sorted(_FINAL_CHECK_FORBIDDEN.intersection(command))
    if bad:
        return f"{command!r} must name a command, not a script (refused: {' '.join(bad)})"
    return None


def _not_blank(value: str | None) -> str | None:
    """Field validator: a given string must not be blank."""
    if value is not None and not value.strip():
        raise ValueError("must not be blank")
    return value


class _Strict(BaseModel):
    """No unknown keys, no type coercion, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AcceptanceItem(_Strict):
    """One acceptance check of an intent."""

    id: str
    text: str
    check: str
    timeout: int | None = Field(default=None, ge=1)

    _blank = field_validator("id", "text")(staticmethod(_not_blank))

    @field_validator("check")
    @classmethod
    def _command(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot be split into words: {exc}") from None
        if not words:
            raise ValueError("must name a command")
        return value

    @property
    def timeout_s(self) -> int:
        """The timeout in seconds (default 1800)."""
        return self.timeout if self.timeout is not None else DEFAULT_TIMEOUT_S


class Intent(_Strict):
    """One task of an initiative (`.lanes/<slug>/<task_id>.toml`)."""

    task_id: str
    revision: int = Field(ge=1)
    goal: str
    scope: list[str]
    blocked_by: list[str] = []
    owner: str | None = None
    risk: Literal["low", "material", "critical"] = "low"
    spec: str | None = None
    issue: int | None = Field(default=None, ge=1)
    review: bool = False
    acceptance: list[AcceptanceItem]

    _blank = field_validator("goal", "owner")(staticmethod(_not_blank))

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str) -> str:
        problem = _id_problem(value, task=True)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must not be empty")
        for entry in value:
            problem = _scope_entry_problem(entry)
            if problem:
                raise ValueError(f"entry {problem}" if entry.strip() else f"an entry {problem}")
        return value

    @field_validator("blocked_by")
    @classmethod
    def _blocked_by(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for blocker in value:
            problem = _id_problem(blocker, task=True)
            if problem:
                raise ValueError(problem)
        duplicates = sorted({b for b in value if value.count(b) > 1})
        if duplicates:
            raise ValueError(f"duplicate task id {duplicates[0]!r}")
        if info.data.get("task_id") in value:
            raise ValueError("a task cannot block itself")
        return value

    @field_validator("spec")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        problem = None if value is None else _path_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("acceptance")
    @classmethod
    def _acceptance(cls, value: list[AcceptanceItem]) -> list[AcceptanceItem]:
        if not value:
            raise ValueError("at least one item is required")
        ids = [item.id for item in value]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate id {duplicates[0]!r}")
        return value


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
            problem = _id_problem(task_id, task=True)
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


def _field_name(loc: tuple[int | str, ...]) -> str:
    """`('acceptance', 0, 'timeout')` -> `acceptance[0].timeout`."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else part
    return name


def _reason(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "value_error":
        return str(error["ctx"]["error"])
    return str(error["msg"])


def _validation_error(path: str, exc: ValidationError) -> LanesError:
    """The first pydantic error as `<path>: <field>: <reason>`."""
    first = exc.errors()[0]
    return usage(f"{path}: {_field_name(first['loc'])}: {_reason(first)}")


def _load_toml(path: str, data: bytes) -> dict[str, Any]:
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise usage(f"{path}: not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise usage(f"{path}: invalid TOML: {' '.join(str(exc).split())}") from None


def intent_doc_hash(doc: Mapping[str, Any]) -> str:
    """`sha256:` + hex SHA-256 of the canonical JSON of an intent document as parsed."""
    return canonical_digest(doc)


def plan_digest(entries: Sequence[Mapping[str, Any]]) -> str:
    """Digest of the ordered `{blocked_by, intent_content_hash, intent_path, intent_revision,
    task_id}` entries; hash strings are taken as given."""
    return canonical_digest([dict(entry) for entry in entries])


@dataclass(frozen=True)
class ParsedIntent:
    """A validated intent together with the document it came from."""

    intent: Intent
    doc: dict[str, Any]
    path: str
    content_hash: str

    @property
    def task_id(self) -> str:
        return self.intent.task_id

    def identity(self) -> dict[str, Any]:
        """`{task_id, intent_path, intent_revision, intent_content_hash}` (SPEC §2)."""
        return {
            "task_id": self.intent.task_id,
            "intent_path": self.path,
            "intent_revision": self.intent.revision,
            "intent_content_hash": self.content_hash,
        }

    def entry(self) -> dict[str, Any]:
        """This task's entry of the plan digest."""
        return {**self.identity(), "blocked_by": list(self.intent.blocked_by)}


def parse_intent(path: str, data: bytes) -> ParsedIntent:
    """Parse and validate the intent file at repo-relative `path`; its stem is the task id."""
    doc = _load_toml(path, data)
    try:
        intent = Intent.model_validate(doc)
    except ValidationError as exc:
        raise _validation_error(path, exc) from None
    stem = path.rsplit("/", 1)[-1].removesuffix(".toml")
    if intent.task_id != stem:
        raise usage(f"{path}: task_id: {intent.task_id!r} must equal the file stem {stem!r}")
    return ParsedIntent(intent=intent, doc=doc, path=path, content_hash=intent_doc_hash(doc))


@dataclass(frozen=True)
class Plan:
    """A validated initiative: its tasks in plan order (every blocker before its dependents)."""

    slug: str
    title: str
    tasks: list[ParsedIntent]
    final_checks: list[str]
    tracker_github: str | None

    def by_id(self, task_id: str) -> ParsedIntent | None:
        """The task with this id, or None."""
        return next((task for task in self.tasks if task.task_id == task_id), None)

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
        initiative = _Initiative.model_validate(_load_toml(initiative_path, files[INITIATIVE_FILE]))
    except ValidationError as exc:
        raise _validation_error(initiative_path, exc) from None

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
