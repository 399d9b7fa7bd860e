"""The scope rule's literal fast path (no Git process) answers as Git's own pathspec matching does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import git
from git_lanes.gitio import Git
from git_lanes.domain.scope import paths_outside, pathspecs

PATHS = ["README", "a/x", "a/b/c", "ab/x", "a.b/b", "B/x", "src/a/b", "src/ab/b", "src-x/y", "srcfile",
         "x y/z", ":c/d", "é/f", "tests/t.py", "a-b", "a.bc"]
ENTRIES = ["a", "ab", "a.b", "B", "b", "src", "src/a", "src/", "a/b", "a/b/c", "x y", ":c", "é", "tests/t.py",
           "a.b/b", "srcfile", "a-b", "nowhere", "src/a/b/c"]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    repo = tmp_path_factory.mktemp("scope") / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    base = git(repo, "write-tree").strip()
    for p in PATHS:
        (repo / p).parent.mkdir(parents=True, exist_ok=True)
        (repo / p).write_text(p + "\n")
    git(repo, "add", "-A")
    return Git(repo), base, git(repo, "write-tree").strip()


@settings(max_examples=60, deadline=None)
@given(scope=st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3))
def test_literal_scopes_match_as_git_matches(trees, scope):
    g, base, tree = trees
    changed = set(g.odb.change_identity(base, tree))
    assert changed == set(PATHS)
    by_git = sorted(changed - set(g.odb.diff_paths(base, tree, pathspecs(scope))))
    assert paths_outside(g, base, tree, scope) == by_git, scope
