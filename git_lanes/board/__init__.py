"""Seeing the batch (SPEC §17.5): `watch`, `report`, `stats` — read from the records only.

`records` gathers a batch's records as plain data (the only part that reads Git, through the stores);
`timeline`, `stats`, `text` and `html` are pure views of them; `watch` is the live board (curses).
Nothing here writes a record, runs a check or merges; `watch --remote` fetches into the tracking
namespace `refs/lanes-remotes/<R>/…` only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..domain.session import Session


def render_report(facts: dict[str, Any]) -> str:
    """The report page of a batch's facts (redacted with this process's secrets)."""
    from ..core.redact import secret_values
    from .html import page
    from .stats import batch_stats
    from .timeline import check_runs, timeline

    return page(facts, timeline(facts), check_runs(facts), batch_stats(facts), secret_values())


def report(s: "Session", slug: str | None, path: str | None = None) -> str:
    """Write the report page of the latest batch of `slug` to `path` (default `<log dir>/report.html`,
    the batch's session log folder, SPEC §13); its path."""
    from ..core.errors import ExitCode, LanesError, usage
    from .records import Source, facts

    src = Source(s)
    found = facts(src, src.choose_slug(slug))
    given = path is not None
    if path is None:
        from ..run import log_dir

        path = os.path.join(log_dir(s, found["record"]["batch_id"]), "report.html")
    path = os.path.abspath(path)
    text = render_report(found)
    partial = f"{path}.{os.getpid()}.tmp"
    try:
        if not given:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, path)
    except OSError as exc:
        if os.path.exists(partial):
            os.unlink(partial)
        if given:
            raise usage(f"--html: {path} cannot be written: {exc.strerror}") from None
        raise LanesError(f"the report {path} cannot be written: {exc.strerror} (lanes.logDir, or --html FILE, "
                         "names another place)", exit_code=ExitCode.FATAL) from None
    return path


def stats_of(s: "Session", slug: str | None) -> dict[str, Any]:
    """`git lanes stats`: the latest batch of `slug`, or every batch of the repository when none is named."""
    from . import stats as numbers
    from .records import Source, every_batch, facts

    src = Source(s)
    if slug is not None:
        return numbers.stats([facts(src, src.choose_slug(slug))])
    return numbers.stats(every_batch(src))


__all__ = ["render_report", "report", "stats_of"]
