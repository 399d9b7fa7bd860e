"""Evidence notes: `refs/notes/lanes/evidence`, real git notes on integrated commits (SPEC §8.5).

`git log --notes=lanes/evidence imm/<slug>` shows them. The ref is shared by every slug, so its
writers hold the `evidence` lock; notes are written with our own read–build–compare-and-swap
loop (a lost race re-reads and retries), usually in the same ref transaction as the batch record.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable

from ..core.errors import LanesError, refused
from ..gitio import EVIDENCE_REF, RefRaceError
from .layout import CorruptRecord

if TYPE_CHECKING:
    from ..gitio import Git

NOTES_AUTHOR = "git-lanes <git-lanes@localhost>"


def note_text(note: dict[str, Any]) -> bytes:
    return (json.dumps(note, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape")


class EvidenceNotes:
    def __init__(self, git: "Git") -> None:
        self.git = git

    def _present(self, tip: str | None) -> tuple[str | None, dict[str, str]]:
        """(notes tree, {annotated commit: note blob}) at `tip`."""
        if tip is None:
            return None, {}
        odb = self.git.odb
        try:
            tree = odb.commit(tip).tree
            return tree, {path.replace("/", ""): oid for path, oid in odb.flat(tree).items()}
        except LanesError as exc:
            raise CorruptRecord(f"corrupt evidence notes at {tip}: {exc.detail}") from None

    def check(self) -> None:
        """Raise CorruptRecord unless the notes ref is absent or a commit whose tree is there: a
        tick looks before it writes anything, so a broken ref stops it with nothing changed."""
        tip = self.git.refs.resolve(EVIDENCE_REF)
        if tip is None:
            return
        try:
            kind = self.git.odb.kind(self.git.odb.commit(tip).tree)
        except LanesError as exc:
            raise CorruptRecord(f"corrupt evidence notes at {tip}: {exc.detail}") from None
        if kind != "tree":
            raise CorruptRecord(f"corrupt evidence notes at {tip}: its tree is missing")

    def read(self, commit: str) -> dict[str, Any] | None:
        _, present = self._present(self.git.refs.resolve(EVIDENCE_REF))
        oid = present.get(commit)
        if oid is None:
            return None
        try:
            return json.loads(self.git.odb.blob(oid))
        except (ValueError, LanesError):
            raise CorruptRecord(f"the evidence note of {commit} is not JSON") from None

    def read_many(self, commits: Iterable[str], ref: str = EVIDENCE_REF) -> dict[str, dict[str, Any]]:
        """{commit: note} for those of `commits` that have a readable note at `ref` (a fetched copy's
        too); read-only views (`report`, `stats`) leave an unreadable note out rather than fail."""
        _, present = self._present(self.git.refs.resolve(ref))
        found = {}
        for commit in commits:
            oid = present.get(commit)
            try:
                note = json.loads(self.git.odb.blob(oid)) if oid is not None else None
            except (ValueError, LanesError):
                note = None
            if isinstance(note, dict):
                found[commit] = note
        return found

    def prepare(self, notes: dict[str, dict[str, Any]]) -> tuple[str, str, str | None] | None:
        """(ref, new tip, old tip) of one notes commit adding the notes not there yet; None when
        every commit has its note already (a re-run after a crash writes nothing new)."""
        if not notes:
            return None
        tip = self.git.refs.resolve(EVIDENCE_REF)
        base, present = self._present(tip)
        odb = self.git.odb
        changes = {commit: odb.write_blob(note_text(note)) for commit, note in notes.items() if commit not in present}
        if not changes:
            return None
        tree = odb.update_tree(base, changes)
        assert tree is not None
        new = odb.write_commit(tree, [tip] if tip else [], f"Notes added by 'git lanes' for {', '.join(sorted(changes))}\n",
                               author=NOTES_AUTHOR, committer=NOTES_AUTHOR, author_time=int(time.time()))
        return EVIDENCE_REF, new, tip

    def add(self, commit: str, note: dict[str, Any], attempts: int = 5) -> None:
        """Add one note (the caller holds the evidence lock)."""
        for _ in range(attempts):
            update = self.prepare({commit: note})
            if update is None:
                return
            try:
                self.git.refs.update([update], "git-lanes: evidence", guarded=True)
                return
            except RefRaceError:
                continue
        raise refused("batch_busy", "the evidence notes moved repeatedly; run the command again")
