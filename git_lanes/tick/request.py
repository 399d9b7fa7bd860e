"""What a tick is asked to do, and what it answers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import LanesError, usage
from ..core.ids import check_id
from ..decisions.admission import MAX_OFFERS, MAX_PATH_BYTES
from ..decisions.instruction import InstructionRequest


@dataclass
class Request:
    offers: list[tuple[str, str]] = field(default_factory=list)
    instruction: InstructionRequest | None = None
    review: tuple[str, str, str | None] | None = None     # (task, approve|reject, text)
    revision: Any = None                                    # revise.RevisionRequest
    max_parallel: int | None = None
    only: set[str] | None = None                            # observe, commit and integrate these children only
    actor: str = "tick"
    closes_issues: bool = True                              # step 10 (`integrate` leaves it to the next tick)
    receipts: bool = True                                   # (v4) false: `tick --no-receipts` (§8.7)
    heartbeats: bool = True                                 # step 7 judges remote heartbeats (not just after an outage)

    @property
    def has_requests(self) -> bool:
        return bool(self.offers or self.instruction or self.review or self.revision)


@dataclass
class Outcome:
    report: dict[str, Any]
    exit_code: int = 0
    error: LanesError | None = None


def parse_offers(raw: list[str], cwd: str) -> list[tuple[str, str]]:
    """`TASK=PATH` strings (untrusted): exit 2 on any malformed one, nothing written."""
    if len(raw) > MAX_OFFERS:
        raise usage(f"invalid lane_offers: at most {MAX_OFFERS} offers per call")
    seen: set[str] = set()
    offers = []
    for item in raw:
        task, sep, path = item.partition("=")
        if not sep or not task or not path:
            raise usage(f"invalid lane_offers: {item!r} is not TASK=PATH")
        try:
            check_id(task, "task id")
        except LanesError as exc:
            raise usage(f"invalid lane_offers: {exc.detail}") from None
        if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
            raise usage(f"invalid lane_offers: path of {task} is longer than {MAX_PATH_BYTES} bytes")
        if task in seen:
            raise usage(f"invalid lane_offers: {task} offered twice")
        seen.add(task)
        offers.append((task, os.path.join(cwd, path)))
    return offers
