"""`git lanes watch --remote R` (SPEC §17.5, §17.6): in any clone, each frame fetches R's records into
`refs/lanes-remotes/<R>/…` only and shows those; no local record, branch or lane ref moves."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import git
from helpers import write_initiative


def lanes(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def refs(root: Path) -> dict[str, str]:
    out = git(root, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_watch_of_a_remote_fetches_into_the_tracking_namespace_only(tmp_path):
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", str(server))
    coord = tmp_path / "coord"
    coord.mkdir()
    git(coord, "init", "-q")
    (coord / "README").write_text("remote board\n")
    write_initiative(coord, "rb", [{"id": "one"}, {"id": "two"}])
    git(coord, "remote", "add", "origin", str(server))
    git(coord, "push", "-q", "origin", "main")
    assert lanes(coord, "start", "rb", "--yes").returncode == 0
    assert lanes(coord, "push").returncode == 0
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(server), str(clone))
    before = refs(clone)

    first = lanes(clone, "watch", "--once", "--remote", "origin")          # the only slug there
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("batch rb-") and "(rb): running" in first.stdout.splitlines()[0]
    after = refs(clone)
    added = {ref for ref in after if ref not in before}
    assert added and all(ref.startswith("refs/lanes-remotes/origin/") for ref in added)
    assert "refs/lanes-remotes/origin/notes/lanes/batch/rb" in added
    assert {ref: after[ref] for ref in before} == before                    # nothing else moved
    assert not any(ref.startswith("refs/notes/lanes/") for ref in after)

    assert lanes(coord, "retire", "rb", "--yes").returncode == 0
    assert lanes(coord, "push").returncode == 0
    again = lanes(clone, "watch", "rb", "--once", "--remote", "origin")    # fetched again for this frame
    assert again.returncode == 0, again.stderr
    assert "(rb): superseded" in again.stdout.splitlines()[0]
    assert not any(ref.startswith("refs/notes/lanes/") for ref in refs(clone))
    local = lanes(clone, "watch", "--once")                                 # without --remote: this clone's own
    assert local.returncode == 2 and "no batch" in local.stderr
