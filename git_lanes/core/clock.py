"""Record time stamps: UTC `YYYY-MM-DDTHH:MM:SS.mmmZ` (SPEC §4). Cheap to import."""

from __future__ import annotations

import datetime as _dt


def now() -> str:
    """UTC `YYYY-MM-DDTHH:MM:SS.mmmZ`."""
    t = _dt.datetime.now(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_time(stamp: str) -> _dt.datetime:
    return _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.timezone.utc)
