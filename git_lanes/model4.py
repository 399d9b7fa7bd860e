"""(v4) Record fields added by SPEC §17 that `model.py` (at its size limit) refers to: kept here, with the
same tolerance of unknown fields as every record model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=False, populate_by_name=True, defer_build=True)


class ConfirmedBy(_Model):
    """Who confirmed `start`/`resume` when it was not a person at a terminal (SPEC §17.6: an MCP client)."""
    actor: Literal["user", "agent"]
    confirmation_ref: str
