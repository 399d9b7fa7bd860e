"""Receipts (SPEC §8.7 v4): each check runs once per input, in one kind of place.

A receipt says that one check passed on one input. Its key is the SHA-256 of the canonical JSON of
`{argv, inputs, env}`: the check's words; the `[path, mode, oid]` entries of the tree its declared
`inputs` match (plus `[entry, null]` for an entry matching nothing), else the whole tree's id; and
the receipt environment (`PATH`, `VIRTUAL_ENV`, `GIT_LANES_TASK`, `GIT_LANES_TASKS`, the variables
`lanes.receiptEnv` names, the output of `lanes.receiptKey`), prefixed by the clone id unless
`lanes.shareReceipts`. `Receipts` is one command's book: it computes keys, looks receipts up under
the rules of where they may stand (`usable`), and writes the passes it was given in one write
(`flush`). The judgements on plain values are pure functions.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

from ..core.canonical import canonical_json
from ..core.contracts import RECEIPT
from ..core.digests import sha256_hex

if TYPE_CHECKING:
    from ..gitio import Git
    from .checks import CheckResult
    from .session import Session

ENV_NAMES = ("PATH", "VIRTUAL_ENV", "GIT_LANES_TASK", "GIT_LANES_TASKS")
LANE, SCRATCH = "lane", "scratch"
_GLOB = "*?[\\"


class Key(NamedTuple):
    key: str
    argv: list[str]
    inputs: Any          # the sorted entries list, or the tree id
    env: str


def normalized(entry: str) -> str:
    """An `inputs` (or scope) entry as it is matched: trimmed, one leading `./` and trailing `/` gone."""
    e = entry.strip()
    if e.startswith("./"):
        e = e[2:]
    return e.rstrip("/")


def key_of(argv: Sequence[str], inputs: Any, env: str) -> str:
    """The receipt key: hex SHA-256 of the canonical JSON of `{argv, inputs, env}`."""
    return sha256_hex(canonical_json({"argv": list(argv), "inputs": inputs, "env": env}).encode("utf-8"))


def env_digest(environ: Mapping[str, str], extra_names: Sequence[str], key_output: str | None,
               clone: str | None) -> str:
    """The receipt environment: the SHA-256 of the values the check gets, prefixed `<clone id>:`."""
    names = list(dict.fromkeys([*ENV_NAMES, *extra_names]))
    digest = sha256_hex(canonical_json({"vars": {n: environ.get(n) for n in names}, "key": key_output}).encode("utf-8"))
    return f"{clone}:{digest}" if clone else digest


def problem(raw: bytes, key: Key) -> str | None:
    """Why the stored bytes are not a receipt of `key` (not JSON, wrong contract, another key, other
    argv/env/inputs), or None when it holds."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("contract") != RECEIPT:
        return f"contract {data.get('contract')!r} is not {RECEIPT}"
    if data.get("key") != key.key:
        return "its key is not its file name"
    for name in ("argv", "env", "inputs"):
        if data.get(name) != getattr(key, name):
            return f"its {name} is not the check's"
    if not isinstance(data.get("duration_ms"), int) or not isinstance(data.get("output_tail"), str):
        return "duration_ms or output_tail missing"
    if data.get("where") not in (LANE, SCRATCH):
        return f"where {data.get('where')!r} is neither lane nor scratch"
    return None


def usable(where: str, own: bool, *, need: str, trust_lane: bool) -> bool:
    """Whether a receipt made at `where` (by this clone: `own`) stands for a run at `need`: a lane's
    `done` takes either kind, of any clone it can read; a candidate rerun or a final check only this
    clone's scratch ones (its lane ones too with `lanes.gateTrustsLane`)."""
    if need == LANE:
        return True
    return own and (where == SCRATCH or trust_lane)


def document(key: Key, result: "CheckResult", *, where: str, tree: str, at: str, batch_id: str,
             task_id: str) -> dict[str, Any]:
    """The receipt's JSON (its `output_tail` redacted already, as every result's is)."""
    return {"contract": RECEIPT, "key": key.key, "where": where, "argv": list(key.argv), "inputs": key.inputs,
            "env": key.env, "tree": tree, "duration_ms": result.duration_ms, "output_tail": result.output_tail,
            "at": at, "batch_id": batch_id, "task_id": task_id}


def input_entries(git: "Git", tree: str, entries: Sequence[str]) -> list[list]:
    """`[path, mode, oid]` of every file of `tree` (as `git ls-tree -r --full-tree` lists it) the
    scope rule matches against the normalized entries, sorted, plus `[entry, null]` per entry that
    matches nothing."""
    from ..gitio.objects import TREE_MODE

    odb = git.odb
    found: dict[str, list] = {}
    missing = []

    def walk(oid: str, prefix: str) -> None:
        for e in odb.entries(oid):
            path = prefix + e.name
            if e.mode == TREE_MODE:
                walk(e.oid, path + "/")
            else:
                found[path] = [path, f"{e.mode:06o}", e.oid]

    for raw in entries:
        entry = normalized(raw)
        before = len(found)
        if any(c in entry for c in _GLOB):
            specs = [f":(glob){entry}", f":(glob){entry}/**"]
            paths = odb.diff_paths(odb.write_tree([]), tree, specs)
            for path in paths:
                e = odb.entry_at(tree, path)
                if e is not None:
                    found[path] = [path, f"{e.mode:06o}", e.oid]
            hit = bool(paths)
        else:
            e = odb.entry_at(tree, entry) if entry else None
            if e is not None and e.mode == TREE_MODE:
                walk(e.oid, entry + "/")
                hit = True
            elif e is not None:
                found[entry] = [entry, f"{e.mode:06o}", e.oid]
                hit = True
            else:
                hit = False
        if not hit and len(found) == before:
            missing.append([entry, None])
    return sorted(found.values()) + sorted(missing, key=lambda m: m[0])


# Passes a book of this process holds but has not written yet, by (repository, where, key): the
# verifiers of a window are books of one process, each writing its receipts when its verification
# ends, and one may need a check on an input another has passed on before then (SPEC §8.9).
_unwritten: dict[tuple[str, str, str], bytes] = {}
_unwritten_lock = threading.Lock()


class Receipts:
    """One command's receipts: look-ups at `where` and the passes to write, in one write."""

    def __init__(self, git: "Git", *, where: str, batch_id: str, clock: Callable[[], str],
                 warn: Callable[[str], None], write: bool = True) -> None:
        self.git = git
        self.where = where
        self.batch_id = batch_id
        self.clock = clock
        self.warn = warn
        self.write = write
        self._clone: str | None = None
        self.share = git.config_bool("lanes.shareReceipts", False)
        self.trust_lane = git.config_bool("lanes.gateTrustsLane", False)
        self.extra_names = git.config_all("lanes.receiptEnv")
        self.key_command = git.config_get("lanes.receiptKey")
        self._key_outputs: dict[str, str | None] = {}
        self._inputs: dict[tuple[str, tuple[str, ...]], list] = {}
        self._new: dict[str, bytes] = {}
        self._warned: set[tuple[str, str]] = set()
        self.off = False          # `lanes.receiptKey` failed: no receipt for the rest of this command

    @property
    def clone(self) -> str:
        """This clone's id, made on first need by a book that writes (never before a check runs: a
        refused `done` changes nothing)."""
        if self._clone is None:
            from .clone import clone_id

            self._clone = clone_id(self.git, create=self.write) or ""
        return self._clone

    # -- keys ----------------------------------------------------------------------------------------

    def _key_output(self, cwd: str, env: Mapping[str, str]) -> str | None:
        """The stdout of `lanes.receiptKey` run where the check runs (once per folder); None: unset.
        A failure turns receipts off for this command, with a warning."""
        if not self.key_command:
            return None
        if cwd not in self._key_outputs:
            from . import procs
            from .checks import split_command

            try:
                done = procs.run(split_command(self.key_command), cwd=cwd, env=env, timeout=60.0, tail=1 << 20,
                                 separate_stderr=True)
                ok = done.exit_code == 0 and not done.timed_out
            except Exception:   # a missing program, a command Git's rules refuse: receipts off
                done, ok = None, False
            if not ok:
                self.off = True
                self.warn(f"lanes.receiptKey ({self.key_command}) failed; receipts are off for this command")
                self._key_outputs[cwd] = None
            else:
                self._key_outputs[cwd] = done.output.decode("utf-8", "replace")
        return self._key_outputs[cwd]

    def key(self, argv: Sequence[str], inputs: Sequence[str] | None, tree: str, *, cwd: str,
            env: Mapping[str, str]) -> Key | None:
        """The key of a check run at `tree` in `cwd` with `env`; None when receipts are off."""
        if self.off:
            return None
        output = self._key_output(cwd, env)
        if self.off:
            return None
        if inputs:
            cache = (tree, tuple(inputs))
            if cache not in self._inputs:
                self._inputs[cache] = input_entries(self.git, tree, inputs)
            value: Any = self._inputs[cache]
        else:
            value = tree
        digest = env_digest(self._without_git_path(env), self.extra_names, output, None if self.share else self.clone)
        return Key(key_of(argv, value, digest), list(argv), value, digest)

    def _without_git_path(self, env: Mapping[str, str]) -> Mapping[str, str]:
        """`env` with Git's exec path taken off the front of PATH: `git lanes done` (Git prepends it) and
        `git-lanes run`'s own checks get the same PATH otherwise, and a receipt must not tell them apart."""
        parts = (env.get("PATH") or "").split(os.pathsep)
        if not parts or not parts[0] or os.path.realpath(parts[0]) != self.git.exec_path:
            return env
        while parts and parts[0] and os.path.realpath(parts[0]) == self.git.exec_path:
            parts.pop(0)
        return {**env, "PATH": os.pathsep.join(parts)}

    # -- look-up and write ---------------------------------------------------------------------------

    def lookup(self, key: Key) -> dict[str, Any] | None:
        """A usable passing receipt of `key`: this clone's first, then (for `done`, with
        `lanes.shareReceipts`) another clone's. One that does not hold is ignored with a warning."""
        from ..core.errors import LanesError
        from ..store.receipts import ReceiptStore

        store = ReceiptStore(self.git)
        pending = self._new.get(key.key)
        if pending is None:
            with _unwritten_lock:
                pending = _unwritten.get((self.git.common_dir, self.where, key.key))
        if pending is not None:
            return json.loads(pending)
        clones = [self.clone] if self.clone else []
        if self.where == LANE and self.share:   # pulled from other clones (`push`/`pull`): for `done` only
            clones += sorted(c for c in store.clones() if c != self.clone)
        for clone in clones:
            try:
                raw = store.read(clone, key.key)
            except LanesError:   # a ref under receipts/ that names no clone: not a receipt of anyone
                continue
            if raw is None:
                continue
            why = problem(raw, key)
            if why is not None:
                if (clone, key.key) not in self._warned:   # once per command, however often it is looked up
                    self._warned.add((clone, key.key))
                    self.warn(f"receipt {key.key} of clone {clone} ignored: {why}")
                continue
            data = json.loads(raw)
            if usable(data["where"], clone == self.clone, need=self.where, trust_lane=self.trust_lane):
                return data
        return None

    def add(self, key: Key, result: "CheckResult", *, tree: str, task_id: str) -> None:
        """A pass to keep (written by `flush`)."""
        if not self.write or self.off:
            return
        doc = document(key, result, where=self.where, tree=tree, at=self.clock(), batch_id=self.batch_id,
                       task_id=task_id)
        self._new[key.key] = (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
        with _unwritten_lock:
            _unwritten[(self.git.common_dir, self.where, key.key)] = self._new[key.key]

    def _unlist(self, keys) -> None:
        with _unwritten_lock:
            for key in keys:
                _unwritten.pop((self.git.common_dir, self.where, key), None)

    def forget(self) -> None:
        """Drop the passes not written yet (`done` whose checks changed the delivery)."""
        self._unlist(list(self._new))
        self._new.clear()

    def flush(self) -> int:
        """Write every new receipt in one commit (the `receipts` lock, taken last); how many."""
        if not self._new or not self.clone:
            return 0
        from ..store.receipts import ReceiptStore

        new, self._new = self._new, {}
        try:
            return ReceiptStore(self.git).write(self.clone, new)
        except Exception as exc:   # a receipt is an optimisation: never fail a verified attempt for it
            self.warn(f"receipts not written: {getattr(exc, 'detail', exc)}")
            return 0
        finally:
            self._unlist(new)


def enabled(git: "Git", batch_flag: bool | None, command_flag: bool = True) -> bool:
    """Receipts apply: `lanes.receipts` (default true), the batch's `receipts` and the command's flag."""
    return command_flag and batch_flag is not False and git.config_bool("lanes.receipts", True)


def book(git: "Git", *, where: str, batch_id: str, clock: Callable[[], str], warn: Callable[[str], None],
         batch_flag: bool | None = None, command_flag: bool = True, write: bool = True) -> Receipts | None:
    """The command's book, or None when receipts do not apply."""
    if not enabled(git, batch_flag, command_flag):
        return None
    return Receipts(git, where=where, batch_id=batch_id, clock=clock, warn=warn, write=write)



# -- `git lanes receipts`, `release --stale` ---------------------------------------------------------------

def _age_s(at: Any, now: str) -> int | None:
    from ..core.clock import parse_time

    try:
        return int((parse_time(now) - parse_time(at)).total_seconds())
    except (TypeError, ValueError):
        return None


def listing(git: "Git", now: str) -> list[dict[str, Any]]:
    """This clone's receipts, newest first: `{key, check, task, where, tree, at, age}` (age in seconds;
    a file that is not a receipt shows with `where: null`)."""
    import shlex

    from ..store.receipts import ReceiptStore
    from .clone import clone_id

    clone = clone_id(git)
    items = []
    for name, raw in (ReceiptStore(git).all(clone).items() if clone else []):
        try:
            data = json.loads(raw)
            argv = data.get("argv")
            check = shlex.join(argv) if isinstance(argv, list) and all(isinstance(a, str) for a in argv) else None
        except (ValueError, UnicodeDecodeError, AttributeError):
            data, check = {}, None
        data = data if isinstance(data, dict) else {}
        items.append({"key": name, "check": check, "task": data.get("task_id"), "where": data.get("where"),
                      "tree": data.get("tree"), "at": data.get("at"), "age": _age_s(data.get("at"), now)})
    return sorted(items, key=lambda i: (str(i["at"] or ""), i["key"]), reverse=True)


def prune(git: "Git", days: float, now: str) -> list[str]:
    """Drop this clone's receipts older than `days` (and files that are no receipt); their keys. The
    ref is parentless, so what is dropped is unreachable at once."""
    from ..store.receipts import ReceiptStore
    from .clone import clone_id

    clone = clone_id(git)
    if not clone:
        return []
    old = [i["key"] for i in listing(git, now) if i["age"] is None or i["age"] >= days * 86400]
    if old:
        ReceiptStore(git).write(clone, {}, drop=old)
    return old


def receipts_view(s: "Session", prune_days: float | None = None) -> dict[str, Any]:
    """`git lanes receipts [--prune DAYS]` (SPEC §8.7): this clone's receipts, after dropping those
    older than DAYS when asked: `{receipts[…], pruned?}`."""
    dropped = prune(s.git, prune_days, s.clock()) if prune_days is not None else None
    doc: dict[str, Any] = {"receipts": listing(s.git, s.clock())}
    if dropped is not None:
        doc["pruned"] = dropped
    return doc
