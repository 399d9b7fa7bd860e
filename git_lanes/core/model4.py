"""(v4) Record fields added by SPEC §17 that `model.py` (at its size limit) refers to: kept here, with the
same tolerance of unknown fields as every record model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer


class _Model(BaseModel):
    """Every record model's base: a field this build does not know (written by a newer one) is kept, not
    refused: SPEC §4 "a v1 reader ignores what it does not know", and nothing is lost when this build
    rewrites the record."""
    model_config = ConfigDict(extra="allow", validate_assignment=False, populate_by_name=True, defer_build=True)


class ConfirmedBy(_Model):
    """Who confirmed `start`/`resume` when it was not a person at a terminal (SPEC §17.6: an MCP client)."""
    actor: Literal["user", "agent"]
    confirmation_ref: str


class Usage(_Model):
    """What an executor reported for one session (SPEC §17.4): any of these, numbers >= 0."""
    input_tokens: float | None = Field(None, ge=0)
    output_tokens: float | None = Field(None, ge=0)
    cost_usd: float | None = Field(None, ge=0)


class SessionEntry(_Model):
    """One session `run`/`work` ran in a lane (SPEC §17.4), in the lane record's `sessions[]`."""
    n: int = Field(ge=1)
    started: str
    ended: str
    exit: int | str | None = None   # the executor's exit code, or the signal that ended it
    usage: Usage | None = None


class UsageBudget(_Model):
    """The usage budgets of a batch (SPEC §17.4, `budget.max_cost_usd`, `budget.max_tokens`): left out
    while unset, so a record without them is stored exactly as before."""
    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        data = handler(self)
        for key in ("max_cost_usd", "max_tokens"):
            if data.get(key) is None:
                data.pop(key, None)
        return data
