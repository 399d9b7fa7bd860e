"""Lock files by kind (SPEC §15 v4, §17.6): under `<git-common-dir>/lanes/locks/` one folder per kind,
so no slug can meet another lock. A slug named `evidence` (v3: every tick stopped on IsADirectoryError),
`receipts`, `batch`, `x.verify` beside `x`: all ordinary slugs, driven side by side to completion."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from conftest import git
from helpers import write_initiative
from test_run import executor, right_check, run_cmd, status  # noqa: F401 (a fixture)

SLUGS = ["evidence", "receipts", "batch", "x.verify", "x"]
KINDS = {"batch", "lane", "verify", "run", "ff", "fetch", "scratch"}


def test_slugs_named_like_locks_run_side_by_side_to_completion(tmp_path, executor):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("locks\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    for n, slug in enumerate(SLUGS):
        tasks = [f"t{n}a", f"t{n}b"]
        write_initiative(root, slug, [{"id": t, "scope": [f"src/{t}.txt"], "check": right_check(t)} for t in tasks],
                         final_checks=[])
    # one coordinator worktree per slug: the batches share the repository, its locks and its scratch pool
    coordinators = {}
    for n, slug in enumerate(SLUGS):
        path = tmp_path / f"co{n}"
        git(root, "worktree", "add", "-q", "-b", f"co{n}", str(path), "HEAD")
        coordinators[slug] = path
    procs = {slug: subprocess.Popen(run_cmd(slug, executor, "--max-parallel", "2"), cwd=coordinators[slug],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for slug in SLUGS}
    outs = {slug: p.communicate(timeout=300) for slug, p in procs.items()}
    for slug, p in procs.items():
        assert p.returncode == 0, f"{slug}: {outs[slug][0][-2000:]}\n{outs[slug][1][-2000:]}"
        report = status(coordinators[slug], slug)
        assert report["batch_state"] == "completed", (slug, report["reason"])
        assert {c["state"] for c in report["children"]} <= {"integrated", "released"}, report["children"]

    locks = Path(git(root, "rev-parse", "--git-common-dir").strip())
    locks = (root / locks if not locks.is_absolute() else locks) / "lanes" / "locks"
    names = {p.name for p in locks.iterdir()}
    v4 = {n for n in names if n in KINDS or n in ("evidence", "receipts")}
    assert {"batch", "lane", "run", "evidence"} <= v4
    assert {p.name for p in (locks / "batch").iterdir()} == set(SLUGS)
    assert {p.name for p in (locks / "run").iterdir()} == set(SLUGS)
    assert set(os.listdir(locks / "lane")) == set(SLUGS)
    assert (locks / "evidence").is_file()
    # the v3 locks a v4 writer also takes (one release): `<slug>.lock` for every slug, `<slug>/<task>.lane`
    # only where the folder meets no lock name
    assert {f"{s}.lock" for s in SLUGS} <= names
    assert (locks / "x" / "t4a.lane").is_file()
    assert not (locks / "x.verify").is_dir() and not (locks / "receipts").is_dir()
    # (v3's `<slug>.verify`, while the verifier's lock still has it, is a file beside them)
    leftover = names - v4 - {f"{s}.lock" for s in SLUGS} - {f"{s}.verify" for s in SLUGS} - {"x"}
    assert not leftover, leftover


def test_a_v4_writer_waits_for_a_v3_process_holding_the_v3_lock(tmp_path):
    """For one release a v4 writer also takes the v3 lock of the same ref: a v3 process holding
    `<slug>.lock` (or `<slug>/<task>.lane`) makes it wait, then `batch_busy`."""
    from git_lanes.gitio import Git
    from git_lanes.store import lane_lock, slug_lock

    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    g = Git(root)
    folder = root / ".git" / "lanes" / "locks"
    (folder / "demo").mkdir(parents=True)
    for v3, take in ((folder / "demo.lock", lambda: slug_lock(g, "demo", timeout=0.2)),
                     (folder / "demo" / "t.lane", lambda: lane_lock(g, "demo", "t", timeout=0.2))):
        fd = os.open(v3, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with pytest.raises(Exception) as exc:
                with take():
                    pass
            assert getattr(exc.value, "code", None) == "batch_busy"
        finally:
            os.close(fd)
        with take():   # free again
            pass
    # a slug whose v3 lane folder would meet a lock name takes no v3 lane lock: nothing is made there
    for slug in ("evidence", "batch", "x.verify", "receipts"):
        with lane_lock(g, slug, "t", timeout=1):
            pass
        assert (folder / "lane" / slug / "t").is_file()
        assert not (folder / slug / "t.lane").exists() and not (folder / slug).is_file()
    with slug_lock(g, "evidence", timeout=1):   # and `evidence` is an ordinary slug beside the evidence lock
        from git_lanes.store import evidence_lock

        with evidence_lock(g, timeout=1):
            pass
    assert (folder / "evidence").is_file() and (folder / "batch" / "evidence").is_file()


def test_a_fast_forward_mark_a_v3_merge_left_is_found_in_its_v4_place(tmp_path):
    from git_lanes.gitio import Git
    from git_lanes.store import fast_forward_mark

    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    folder = root / ".git" / "lanes" / "locks"
    folder.mkdir(parents=True)
    (folder / "demo.ff").write_text("abc\n")
    mark = Path(fast_forward_mark(Git(root), "demo"))
    assert mark == folder / "ff" / "demo" and mark.read_text() == "abc\n" and not (folder / "demo.ff").exists()
    (folder / "x.ff").mkdir()   # the v3 lane folder of a slug named `x.ff` is no mark of `x`
    assert not Path(fast_forward_mark(Git(root), "x")).exists() and (folder / "x.ff").is_dir()
