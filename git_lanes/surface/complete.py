"""What a TAB offers: slugs and task ids, from refs and the committed initiatives alone (no object
database opened, no model built: every TAB runs the CLI)."""

from __future__ import annotations

from ..gitio import BATCH_RECORD_PREFIX, LANE_BRANCH_PREFIX, Git


def slugs(incomplete: str) -> list[str]:
    try:
        names = Git().refs.under(BATCH_RECORD_PREFIX)
    except Exception:   # not a repository, no git: nothing to offer
        return []
    found = (name.rsplit("/", 1)[-1] for name in names)
    return [name for name in found if name.startswith(incomplete)]


def tasks(incomplete: str) -> list[str]:
    try:
        git = Git()
        found = {name.rsplit("/", 1)[-1] for name in git.refs.under(LANE_BRANCH_PREFIX)}
        for path in git.odb.paths("HEAD", ".lanes"):
            if path.endswith(".toml") and not path.endswith("/initiative.toml"):
                found.add(path.rsplit("/", 1)[-1][:-5])
    except Exception:
        return []
    return sorted(t for t in found if t.startswith(incomplete))
