"""The result item of a check as records store it (SPEC §2.1; v4 §8.7, §8.8): `model.py` re-exports it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_serializer


class _Model(BaseModel):
    # as `model._Model`: a field a newer build wrote is kept, not refused
    model_config = ConfigDict(extra="allow", validate_assignment=False, populate_by_name=True, defer_build=True)


class CheckRun(_Model):
    """(v4, SPEC §8.8) One run of a flaky check: how it ended and its (redacted) output tail."""
    exit_code: int | None
    signal: str | None = None
    output_tail: str = ""


class CheckResultModel(_Model):
    id: str
    command: str
    exit_code: int | None
    signal: str | None
    passed: bool
    duration_ms: int = Field(ge=0)
    output_tail: str
    cached: bool = False                   # (v4) a receipt stood for the run (SPEC §8.7)
    receipt: str | None = None
    flaky: bool = False                    # (v4) passed on a retry (SPEC §8.8)
    attempts: list[CheckRun] | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        data = handler(self)
        for key in ("cached", "receipt", "flaky", "attempts"):
            if key in data and not data[key]:
                del data[key]
        return data
