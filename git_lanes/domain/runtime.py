"""`start --executor-runtime PATH` (SPEC §6.3): the contract identifiers of the runtime the lanes will
run, read from a manifest file or a git-lanes installation, compared with ours (never versions).

An installation is any of: a source tree or prefix holding `contracts.json`; the `git_lanes` package
folder (its `core/contracts.py`; `contracts.py` or `model.py` in older layouts); a folder holding it (a source
tree, a `site-packages`); a prefix (a venv, `/usr/local`) holding `lib/python*/site-packages/git_lanes`
or, failing that, `bin/git-lanes`; or the `git-lanes` executable itself, asked `contracts --json`.
"""

from __future__ import annotations

import glob
import json
import os
import re

from ..core.model import contracts_manifest
from .checks import last_lines

RUN_TIMEOUT = 60.0
# where the names live: `core/contracts.py`; `contracts.py`, and `model.py` before that, in older layouts
_SOURCES = (os.path.join("core", "contracts.py"), "contracts.py", "model.py")
_NAMES = {"BATCH_RECORD": "batch_record", "LANE_RECORD": "lane_record", "BATCH_REPORT": "batch_report",
          "STORE_LAYOUT": "store_layout", "CONTRACTS": "contract", "RECEIPT": "receipt"}


class _Unreadable(Exception):
    """PATH holds no manifest this build can read: why."""


def runtime_mismatch(path: str) -> str | None:
    """None when the runtime at `path` has our contract identifiers; else the refusal's detail, in
    §6.3's words (`coordinator runtime … and Lane runtime … disagree (…); load the same runtime …`)."""
    try:
        theirs = _manifest(path)
    except _Unreadable as exc:
        return _refusal(path, str(exc))
    ours = contracts_manifest()
    # (v4) a runtime that names no receipt contract keeps no receipt: nothing of it to disagree on
    diffs = [f"{k}: {ours[k]} != {theirs.get(k)}" for k in sorted(ours)
             if theirs.get(k) != ours[k] and not (k == "receipt" and k not in theirs)]
    return _refusal(path, "; ".join(diffs)) if diffs else None


def _refusal(path: str, what: str) -> str:
    import git_lanes

    src = os.path.dirname(os.path.abspath(git_lanes.__file__))
    return (f"coordinator runtime {src} and Lane runtime {path} disagree ({what}); "
            "load the same runtime on both sides before starting the batch")


def _manifest(path: str) -> dict:
    if os.path.isdir(path):
        return _installation(path)
    if not os.path.isfile(path):
        raise _Unreadable(f"{path}: no such file or directory")
    if os.access(path, os.X_OK) and not _looks_like_json(path):
        return _ask(path)
    return _read_json(path)


def _installation(path: str) -> dict:
    """The manifest of the git-lanes installation at the folder `path`."""
    for sub in ("contracts.json", os.path.join("git_lanes", "contracts.json")):
        if os.path.isfile(os.path.join(path, sub)):
            return _read_json(os.path.join(path, sub))
    packages = [path, os.path.join(path, "git_lanes")] + \
        sorted(glob.glob(os.path.join(glob.escape(path), "lib*", "python*", "site-packages", "git_lanes")))
    for package in packages:
        sources = [os.path.join(package, name) for name in _SOURCES if os.path.isfile(os.path.join(package, name))]
        if sources and (package != path or os.path.isfile(os.path.join(path, "__init__.py"))):
            theirs: dict[str, str] = {}
            for source in reversed(sources):   # the newest layout's file wins
                theirs.update(_from_source(source))
            return theirs
    executable = os.path.join(path, "bin", "git-lanes")
    if os.path.isfile(executable) and os.access(executable, os.X_OK):
        return _ask(executable)
    raise _Unreadable(f"no contract manifest and no git-lanes installation under {path}")


def _from_source(source: str) -> dict[str, str]:
    try:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"cannot read {source}: {exc}") from None
    out = {}
    for const, key in _NAMES.items():
        m = re.search(rf'^{const} = "([^"]+)"', text, re.M)
        if m:
            out[key] = m.group(1)
    return out


def _looks_like_json(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4096).lstrip()[:1] == b"{"
    except OSError:
        return False


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"cannot read the contract manifest {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise _Unreadable(f"{path} is not a contract manifest")
    return doc


def _ask(executable: str) -> dict:
    """`<executable> contracts --json`: the manifest of the runtime that executable runs."""
    from .procs import run

    shown = f"{executable} contracts --json"
    try:
        done = run([executable, "contracts", "--json"], cwd=os.path.dirname(os.path.abspath(executable)),
                   env=os.environ, timeout=RUN_TIMEOUT, separate_stderr=True, tail=1 << 20)
    except OSError as exc:
        raise _Unreadable(f"cannot run {shown}: {exc.strerror or exc}") from None
    if done.exit_code != 0:
        status = f"exit {done.exit_code}" if done.exit_code is not None else done.signal or "killed"
        tail = last_lines(done.stderr.decode("utf-8", "replace")) or "(no output)"
        raise _Unreadable(f"{shown} failed: {status}: {tail}")
    try:
        doc = json.loads(done.output)
    except ValueError as exc:
        raise _Unreadable(f"{shown} printed no contract manifest: {exc}") from None
    if not isinstance(doc, dict):
        raise _Unreadable(f"{shown} printed no contract manifest")
    return doc
