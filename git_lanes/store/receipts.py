"""Receipts in Git (SPEC §8.7 v4): `refs/notes/lanes/receipts/<clone id>`, one per clone.

Each clone writes only its own ref: a parentless commit (no history, so a pruned receipt's objects
become unreachable and `git gc` drops them) whose tree holds `<2 hex>/<key>.json`. Its writers —
a lane's `done` and the coordinator's ticks — hold `<git-common-dir>/lanes/locks/receipts`, always
taken last, and move the ref by compare-and-swap (a lost race reads again and retries). The bytes
are handed out as they are: `domain/receipts.py` judges whether one holds.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Iterable, Mapping

from ..core.errors import LanesError, fatal, refused
from ..gitio import RefRaceError
from ..gitio.objects import TREE_MODE
from .locks import receipts_lock

if TYPE_CHECKING:
    from ..gitio import Git

RECEIPTS_PREFIX = "refs/notes/lanes/receipts/"
AUTHOR = "git-lanes <git-lanes@localhost>"
_CLONE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KEY = re.compile(r"^[0-9a-f]{64}$")


def receipts_ref(clone: str) -> str:
    if not _CLONE.match(clone) or clone.endswith(".lock") or ".." in clone:
        raise fatal(f"lanes.cloneId {clone!r} cannot name a ref")
    return RECEIPTS_PREFIX + clone


def receipt_path(key: str) -> str:
    return f"{key[:2]}/{key}.json"


class ReceiptStore:
    def __init__(self, git: "Git") -> None:
        self.git = git

    def clones(self) -> dict[str, str]:
        """{clone id: tip} of every receipts ref this repository holds (this clone's and, with
        `lanes.shareReceipts`, those pulled from others)."""
        return {ref[len(RECEIPTS_PREFIX):]: tip for ref, tip in self.git.refs.under(RECEIPTS_PREFIX.rstrip("/")).items()
                if ref.startswith(RECEIPTS_PREFIX)}

    def tip(self, clone: str) -> str | None:
        return self.git.refs.resolve(receipts_ref(clone))

    def read(self, clone: str, key: str, tip: str | None = None) -> bytes | None:
        """The bytes stored for `key` in a clone's receipts, or None (no ref, no such file)."""
        tip = tip if tip is not None else self.tip(clone)
        if tip is None or not _KEY.match(key):
            return None
        try:
            return self.git.odb.blob_at(tip, receipt_path(key))
        except LanesError:
            return None

    def all(self, clone: str) -> dict[str, bytes]:
        """{file name without `.json`: bytes} of every receipt of a clone."""
        tip = self.tip(clone)
        if tip is None:
            return {}
        odb = self.git.odb
        found = {}
        for folder in odb.entries(odb.tree_of(tip)):
            if folder.mode != TREE_MODE:
                continue
            for entry in odb.entries(folder.oid):
                if entry.mode != TREE_MODE and entry.name.endswith(".json"):
                    found[entry.name[:-5]] = odb.blob(entry.oid)
        return found

    def write(self, clone: str, add: Mapping[str, bytes], drop: Iterable[str] = (), attempts: int = 8) -> int:
        """Add (or replace) and drop receipts in one write of a new parentless commit; the number of
        files changed. Nothing changes: nothing is written."""
        drop = [k for k in drop if _KEY.match(k)]
        add = {k: v for k, v in add.items() if _KEY.match(k)}
        if not add and not drop:
            return 0
        ref = receipts_ref(clone)
        odb = self.git.odb
        blobs = {receipt_path(k): odb.write_blob(v) for k, v in add.items()}
        with receipts_lock(self.git, ref):
            for _ in range(attempts):
                tip = self.git.refs.resolve(ref)
                base = odb.tree_of(tip) if tip else None
                present = odb.flat(base) if base else {}
                changes: dict[str, str | None] = {p: oid for p, oid in blobs.items() if present.get(p) != oid}
                changes.update({receipt_path(k): None for k in drop if receipt_path(k) in present})
                if not changes:
                    return 0
                tree = odb.update_tree(base, changes)
                if tree is None:
                    tree = odb.write_tree([])
                commit = odb.write_commit(tree, [], f"git-lanes: receipts of clone {clone}\n", author=AUTHOR,
                                          committer=AUTHOR, author_time=int(time.time()))
                try:
                    self.git.refs.update([(ref, commit, tip)], "git-lanes: receipts", guarded=True)
                    return len(changes)
                except RefRaceError:
                    continue
        raise refused("batch_busy", "the receipts ref moved repeatedly; run the command again")
