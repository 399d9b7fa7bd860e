"""Lanes of one slug are made and removed side by side (`run` provisions in threads, `provision`s run
in parallel processes). A removal takes the folders above its lane once they are empty; a lane being
made at that moment must make them again, not fail. Found by the kill soak (seed 71): a run that was
not killed exited 128 with `internal error: FileNotFoundError` on the slug's lane folder."""

from __future__ import annotations

import os

import pytest

from flow import exists, intent, start, write_plan


@pytest.fixture
def vanishing_parent(monkeypatch):
    """`os.mkdir` that, the first time it makes a folder named `name`, first removes that folder's
    parent when it is empty: what another lane's removal does between `makedirs`' check of the parent
    and its `mkdir` of the child."""
    real = os.mkdir
    armed: dict[str, bool] = {}

    def arm(name: str) -> None:
        armed[name] = True

    def mkdir(path, *args, **kwargs):
        path = os.fspath(path)
        if armed.pop(os.path.basename(path), False):
            parent = os.path.dirname(path)
            if os.path.isdir(parent) and not os.listdir(parent):
                os.rmdir(parent)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    return arm


def test_make_folders_makes_a_parent_removed_meanwhile_again(tmp_path, vanishing_parent):
    from git_lanes.gitio.tempnames import make_folders

    (tmp_path / "repo").mkdir()
    vanishing_parent("slug")
    with pytest.raises(FileNotFoundError):     # what the plain makedirs does: the race is real
        os.makedirs(tmp_path / "repo" / "slug", exist_ok=True)
    (tmp_path / "repo").mkdir()
    vanishing_parent("slug")
    make_folders(str(tmp_path / "repo" / "slug"))
    assert (tmp_path / "repo" / "slug").is_dir()


def test_a_lane_is_made_while_another_lanes_removal_takes_the_empty_folders(repo, vanishing_parent):
    from git_lanes.domain.session import Session
    from git_lanes.domain.workspace import create_lane, default_lane_path

    write_plan(repo, "soak", {"a": intent("a", scope=["src/a"], acceptance=[("A1", "out", exists("src/a/out.txt"))])})
    report = start(repo, "soak")
    s = Session(cwd=str(repo))
    target = default_lane_path(s, "soak", "a")
    os.makedirs(os.path.dirname(os.path.dirname(target)))   # the repository's folder, empty: a removal takes it
    vanishing_parent("soak")
    base = s.git.refs.resolve("refs/heads/imm/soak")
    path = create_lane(s, "soak", "a", base, report["batch_id"], coordinator=str(repo))
    assert path == target and os.path.isfile(os.path.join(path, ".git"))
    assert s.git.refs.resolve("refs/heads/imm-lane/soak/a") == base
