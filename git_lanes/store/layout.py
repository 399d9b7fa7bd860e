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

from ..canonical import canonical_json
from ..digests import sha1_hex
from ..errors import ExitCode, LanesError

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
                children.append((int(item.pop("index")), item))
            elif top == "identities":
                item = _object(raw, path)
                identities[str(item["task_id"])] = item
            elif top in lists:
                lists[top].append((int(path.rsplit("/", 1)[1].split(".")[0]), json.loads(raw)))
        data["children"] = [c for _, c in sorted(children, key=lambda p: p[0])]
        data["intent_identities"] = identities
        for name, items in lists.items():
            data[name] = [v for _, v in sorted(items, key=lambda p: p[0])]
        where = "final_verification.json"
        if "final_verification.json" in files:
            data["final_verification"] = _object(files["final_verification.json"], "final_verification.json")
        return data
    except KeyError as exc:
        raise CorruptRecord(f"corrupt batch record: {where}: missing field {exc.args[0]}") from None
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise CorruptRecord(f"corrupt batch record: {where}: {one_line(exc)}") from None


def record_from_files(files: dict[str, bytes], where: str = ""):
    """The validated BatchRecord of a record tree's files, or CorruptRecord naming the field."""
    from ..model import BatchRecord

    data = record_data(files)
    try:
        return BatchRecord.model_validate(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise CorruptRecord(f"corrupt batch record{where}: {one_line(exc)}") from None
