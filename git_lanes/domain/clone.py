"""Who this clone is (SPEC §14): its `lanes.cloneId` and its host name. Cheap to import: a lane
command asks whether a claim is this clone's."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..gitio import Git


def clone_id(git: "Git", create: bool = False) -> str | None:
    """This clone's `lanes.cloneId`: a random id made once per clone (with `create`)."""
    value = git.config_get("lanes.cloneId")
    if value or not create:
        return value or None
    import os
    import time
    import uuid

    from ..gitio import GitError
    from ..store.locks import flock, lock_dir

    # Several commands of this clone may need it first at once (`run`'s dones and verifiers): one makes
    # it, under the `receipts` lock (nothing else is held when an id is first needed), the others read it.
    with flock(os.path.join(lock_dir(git), "receipts"), 30, "another git-lanes command is making lanes.cloneId"):
        for attempt in range(50):
            git.__dict__.pop("config", None)   # another process's, once written
            value = git.config_get("lanes.cloneId")
            if value:
                return value
            try:
                git.config_write("lanes.cloneId", uuid.uuid4().hex[:16])
            except GitError:   # `config.lock` held by another Git command: wait for it
                if attempt == 49:
                    raise
                time.sleep(0.05)
    return git.config_get("lanes.cloneId")


def host_name() -> str:
    import socket

    return socket.gethostname() or "localhost"
