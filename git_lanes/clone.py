"""Who this clone is (SPEC §14): its `lanes.cloneId` and its host name. Cheap to import: a lane
command asks whether a claim is this clone's."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .gitio import Git


def clone_id(git: "Git", create: bool = False) -> str | None:
    """This clone's `lanes.cloneId`: a random id made once per clone (with `create`)."""
    value = git.config_get("lanes.cloneId")
    if value or not create:
        return value or None
    import time
    import uuid

    from .gitio import GitError

    for attempt in range(50):   # two commands of this clone may make it at once: `config.lock` is held
        try:
            git.config_write("lanes.cloneId", uuid.uuid4().hex[:16])
        except GitError:
            if attempt == 49:
                raise
            time.sleep(0.05 + attempt * 0.01)
            git.__dict__.pop("config", None)   # the other one's, once written
            value = git.config_get("lanes.cloneId")
            if value:
                return value
            continue
        break
    return git.config_get("lanes.cloneId")


def host_name() -> str:
    import socket

    return socket.gethostname() or "localhost"
