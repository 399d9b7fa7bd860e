"""The batch record as files (store contract `git_lanes/store_layout/v2`, SPEC §15):

  batch.json                       the fixed-size fields
  children/<2 hex>/<task>.json     one blob per child (`index` keeps plan order)
  identities/<2 hex>/<task>.json   one blob per intent identity
  <list>/<bucket>/<index>.json     one blob per appended list entry
  final_verification.json

Pure: bytes in, bytes out. A record that cannot be read back is `CorruptRecord` (exit 128).
"""

from __future__ import annotations

import json
from typing import Any

from ..core.canonical import canonical_json
from ..core.digests import sha1_hex
from ..core.errors import ExitCode, LanesError

STORED = ("contract", "batch_state")   # in every batch.json any build wrote (SPEC §4)
LISTS = ("adopted_heads", "restores", "interventions", "revisions", "reviews", "reseals", "archived_lanes")
BUCKET = 256


class CorruptRecord(LanesError):
    def __init__(self, detail: str) -> None:
        super().__init__(detail, exit_code=ExitCode.FATAL)


def shard(key: str) -> str:
    return sha1_hex(key.encode("utf-8", "surrogateescape"))[:2]


def blob(value: Any) -> bytes:
    """Canonical JSON, strictly UTF-8: a string that is not (a lone surrogate) is a bug upstream,
    reported as a fatal error before anything is written."""
    try:
        return (canonical_json(value) + "\n").encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LanesError(f"a record field is not valid UTF-8 ({exc.reason} at {exc.start}); nothing was written",
                         exit_code=ExitCode.FATAL) from None


def one_line(exc: Exception) -> str:
    """The first line of an error, a validation error as `<field>: <message>`."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            err = errors()[0]
        except (TypeError, IndexError):
            err = None
        if err is not None:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            return f"{loc}: {err['msg']}" if loc else err["msg"]
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def batch_files(record) -> dict[str, bytes]:
    """The record as {path: bytes}."""
    data = record.model_dump(mode="json", by_alias=True)
    files: dict[str, bytes] = {}
    for index, child in enumerate(data.pop("children")):
        files[f"children/{shard(child['task_id'])}/{child['task_id']}.json"] = blob({"index": index, **child})
    for task_id, identity in data.pop("intent_identities").items():
        files[f"identities/{shard(task_id)}/{task_id}.json"] = blob(identity)
    for name in LISTS:
        for index, item in enumerate(data.pop(name)):
            files[f"{name}/{index // BUCKET:04d}/{index:06d}.json"] = blob(item)
    final = data.pop("final_verification")
    if final is not None:
        files["final_verification.json"] = blob(final)
    files["batch.json"] = blob(data)
    return files


def _object(raw: bytes, path: str) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _in_order(items: list[tuple[Any, Any]], what: str) -> list[tuple[int, Any]]:
    """`items` (index, value) sorted by index, when the indexes are exactly 0..n-1 (a gap or a
    duplicate is a tampered record, never closed up)."""
    ordered = sorted(items, key=lambda p: p[0] if isinstance(p[0], int) and not isinstance(p[0], bool) else -1)
    indexes = [i for i, _ in ordered]
    if indexes != list(range(len(ordered))):
        raise ValueError(f"the indexes of {what} are {indexes[:8]}, not 0..{len(ordered) - 1}")
    return ordered


def record_data(files: dict[str, bytes]) -> dict[str, Any]:
    """The record's fields as one document (to validate), from its files; a corrupt one names the file
    and what is wrong with it."""
    where = "batch.json"
    try:
        if "batch.json" not in files:
            raise CorruptRecord("corrupt batch record: batch.json is missing")
        data = _object(files["batch.json"], "batch.json")
        children = []
        lists: dict[str, list[tuple[int, Any]]] = {name: [] for name in LISTS}
        identities = {}
        for path, raw in files.items():
            where = path
            top = path.split("/", 1)[0]
            if top == "children":
                item = _object(raw, path)
                index = item.pop("index")
                if "state" not in item:   # every build writes it: never defaulted to pending
                    raise KeyError("state")
                if path != f"children/{shard(str(item['task_id']))}/{item['task_id']}.json":
                    raise ValueError(f"holds child {item['task_id']!r}")
                children.append((index, item))
            elif top == "identities":
                item = _object(raw, path)
                if path != f"identities/{shard(str(item['task_id']))}/{item['task_id']}.json":
                    raise ValueError(f"holds the identity of {item['task_id']!r}")
                identities[str(item["task_id"])] = item
            elif top in lists:
                lists[top].append((int(path.rsplit("/", 1)[1].split(".")[0]), json.loads(raw)))
        where = "children"
        data["children"] = [c for _, c in _in_order(children, "children/<2 hex>/<task>.json")]
        data["intent_identities"] = identities
        for name, items in lists.items():
            where = name
            ordered = _in_order(items, f"{name}/<bucket>/<index>.json")
            for index, _ in ordered:
                if f"{name}/{index // BUCKET:04d}/{index:06d}.json" not in files:
                    raise ValueError(f"entry {index} is not at {name}/{index // BUCKET:04d}/{index:06d}.json")
            data[name] = [v for _, v in ordered]
        where = "final_verification.json"
        if "final_verification.json" in files:
            data["final_verification"] = _object(files["final_verification.json"], "final_verification.json")
        where = "batch.json"
        for key in STORED:   # fields every build writes: a record without them is not one, never defaulted
            if key not in data:
                raise KeyError(key)
        return data
    except KeyError as exc:
        raise CorruptRecord(f"corrupt batch record: {where}: missing field {exc.args[0]}") from None
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise CorruptRecord(f"corrupt batch record: {where}: {one_line(exc)}") from None


def record_from_files(files: dict[str, bytes], where: str = ""):
    """The validated BatchRecord of a record tree's files, or CorruptRecord naming the field."""
    from ..core.model import BatchRecord

    data = record_data(files)
    try:
        return BatchRecord.model_validate(data, strict=True)   # as stored: no coercion ("1" is not 1)
    except (ValueError, TypeError, RecursionError) as exc:
        raise CorruptRecord(f"corrupt batch record{where}: {one_line(exc)}") from None
