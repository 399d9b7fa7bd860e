"""(v4, SPEC §8.7) `lanes.shareReceipts`: which receipts refs `push` and `pull` carry, and how.

Each clone writes only its own `refs/notes/lanes/receipts/<clone id>`: a parentless commit, no
history, so a new value never descends from the old one and the fast-forward rules of the other
refs do not apply to it. Instead:

  without `lanes.shareReceipts`   no receipts ref moves: the fetch leaves them out (a negative
                                  refspec), push and pull do not look at them;
  push (shared)                   sends this clone's own ref only, as a compare-and-swap replacement
                                  of the value the fetch saw there (the lease of the atomic push):
                                  `pushed`, or `up_to_date`; another clone's ref, pulled here, is
                                  never sent back (it is not this clone's to write);
  pull (shared)                   replaces the local copy of every other clone's ref by the remote's
                                  value (its writer's): `pulled`, with `"rewound": true` when a copy
                                  was replaced; this clone's own ref is never pulled: `local_ahead`
                                  when the remote's differs (the next push sends ours).

A ref under `receipts/` that names no possible clone id is never carried. Whether a pulled receipt
stands for a run is `receipts.py`'s business: another clone's only for `done`, never for a candidate
rerun or a final check, and one that does not hold is ignored with a warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ..gitio import Git

RECEIPTS = "refs/notes/lanes/receipts/"
EXCLUDE = f"^{RECEIPTS}*"     # the negative refspec that keeps every receipts ref out of a fetch


class Sharing(NamedTuple):
    on: bool
    own: str | None      # this clone's receipts ref (None: no clone id yet, so none of its own)

    def carried(self, ref: str, *, local: bool) -> bool:
        """Whether `ref` takes part: every ref but receipts; with sharing, this clone's own receipts
        ref on the local side (the only one push sends) and every clone's on the remote side."""
        if not ref.startswith(RECEIPTS):
            return True
        if not self.on or not _clone_ref(ref):
            return False
        return ref == self.own if local else True

    def refspecs(self) -> list[str]:
        return [] if self.on else [EXCLUDE]


def sharing(git: "Git") -> Sharing:
    if not git.config_bool("lanes.shareReceipts", False):
        return Sharing(False, None)
    from ..domain.clone import clone_id

    mine = clone_id(git)
    own = RECEIPTS + mine if mine else None
    return Sharing(True, own if own and _clone_ref(own) else None)


def _clone_ref(ref: str) -> bool:
    from ..core.errors import LanesError
    from ..store.receipts import receipts_ref

    try:
        return receipts_ref(ref[len(RECEIPTS):]) == ref
    except LanesError:
        return False


def push_status(share: Sharing, ref: str, ours: str, theirs: str | None) -> str | None:
    """This clone's own receipts ref: `up_to_date`, else `pushed` (replacing the remote's value under
    its lease); None for any other ref."""
    if not share.on or ref != share.own:
        return None
    return "up_to_date" if ours == theirs else "pushed"


def pull_item(share: Sharing, ref: str, ours: str | None, theirs: str) -> dict[str, Any] | None:
    """A receipts ref as pull classifies it; None for any other ref."""
    if not ref.startswith(RECEIPTS):
        return None
    if ours == theirs:
        status = "up_to_date"
    elif ref == share.own:
        status = "local_ahead"   # only this clone writes it: the next push sends ours
    else:
        status = "pulled"
    item: dict[str, Any] = {"ref": ref, "status": status, "local": ours, "remote": theirs}
    if status == "pulled" and ours is not None:
        item["rewound"] = True
    return item
