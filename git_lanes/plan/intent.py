"""One intent (SPEC §2): `.lanes/<slug>/<task_id>.toml`, parsed strictly. Pure.

Every validation error is `usage("<file>: <field>: <reason>")`, one line. Models are built on
first use, so a command that never parses an intent never pays for them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ..core.errors import LanesError, usage
from ..core.ids import id_problem, path_problem, scope_entry, scope_entry_problem, shell_syntax_problem
from .intentdoc import DEFAULT_TIMEOUT_S, intent_doc_hash, load_toml  # noqa: F401 (re-exported)


def _valid(value, problem: str | None):
    """`value`, or the validation error `problem` names."""
    if problem:
        raise ValueError(problem)
    return value


def _not_blank(value: str | None) -> str | None:
    """Field validator: a given string must not be blank."""
    if value is not None and not value.strip():
        raise ValueError("must not be blank")
    return value


class _Strict(BaseModel):
    """No unknown keys, no type coercion, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class AcceptanceItem(_Strict):
    """One acceptance check of an intent."""

    id: str
    text: str
    check: str
    timeout: int | None = Field(default=None, ge=1)
    inputs: list[str] | None = None     # (v4) what the check reads (SPEC §2, §8.7); None: the whole tree
    receipts: bool | None = None        # (v4) false: the check never has a receipt (SPEC §8.7)

    _blank = field_validator("id", "text")(staticmethod(_not_blank))

    @field_validator("inputs")
    @classmethod
    def _inputs(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else Intent._scope(value)

    @field_validator("check")
    @classmethod
    def _command(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot be split into words: {exc}") from None
        if not words:
            raise ValueError("must name a command")
        problem = shell_syntax_problem(value)
        if problem:
            raise ValueError(problem)
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
        return _valid(value, id_problem(value, task=True))

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must not be empty")
        for entry in value:
            problem = scope_entry_problem(entry)
            if problem:
                raise ValueError(f"entry {problem}" if entry.strip() else f"an entry {problem}")
        return [scope_entry(entry) for entry in value]   # `./src/a` is `src/a` (the content hash is the document's)

    @field_validator("blocked_by")
    @classmethod
    def _blocked_by(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for blocker in value:
            _valid(blocker, id_problem(blocker, task=True))
        duplicates = sorted({b for b in value if value.count(b) > 1})
        if duplicates:
            raise ValueError(f"duplicate task id {duplicates[0]!r}")
        if info.data.get("task_id") in value:
            raise ValueError("a task cannot block itself")
        return value

    @field_validator("spec")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        return _valid(value, None if value is None else path_problem(value))

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


def validation_error(path: str, exc: ValidationError) -> LanesError:
    """The first pydantic error as `<path>: <field>: <reason>`."""
    first = exc.errors()[0]
    return usage(f"{path}: {_field_name(first['loc'])}: {_reason(first)}")


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
    doc = load_toml(path, data)
    try:
        intent = Intent.model_validate(doc)
    except ValidationError as exc:
        raise validation_error(path, exc) from None
    stem = path.rsplit("/", 1)[-1].removesuffix(".toml")
    if intent.task_id != stem:
        raise usage(f"{path}: task_id: {intent.task_id!r} must equal the file stem {stem!r}")
    return ParsedIntent(intent=intent, doc=doc, path=path, content_hash=intent_doc_hash(doc))
