"""The gateway's object layer and ref reads against real Git: what it writes, Git reads back (and the
same ids dulwich and `git hash-object` compute); what Git writes, it reads — through either reader."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import git
from git_lanes.gitio import Git, TreeEntry


@pytest.fixture(params=[False, True], ids=["dulwich", "cat-file"])
def lean(request):
    return request.param


def test_objects_written_here_are_what_git_and_dulwich_compute(repo, lean):
    from dulwich.objects import Commit, Tree

    g = Git(repo, lean=lean)
    blob = g.odb.write_blob(b"hello\n")
    assert blob == git(repo, "hash-object", "--stdin", input="hello\n").strip()
    sub = g.odb.write_tree([TreeEntry("x", 0o100755, blob)])
    tree = g.odb.write_tree([TreeEntry("a.txt", 0o100644, blob), TreeEntry("a", 0o040000, sub),
                             TreeEntry("a-b", 0o100644, blob)])
    expected = Tree()
    inner = Tree()
    inner.add(b"x", 0o100755, blob.encode())
    for name, mode, oid in ((b"a.txt", 0o100644, blob.encode()), (b"a", 0o040000, inner.id),
                            (b"a-b", 0o100644, blob.encode())):
        expected.add(name, mode, oid)
    assert tree == expected.id.decode()
    assert git(repo, "ls-tree", "--name-only", tree).split() == ["a-b", "a.txt", "a"]   # Git's order
    commit = g.odb.write_commit(tree, [], "imm(x): y\n\nLanes-Batch: z\n", author="A <a@b>", committer="C <c@d>",
                                author_time=1700000000)
    theirs = Commit()
    theirs.tree, theirs.parents = tree.encode(), []
    theirs.author, theirs.committer = b"A <a@b>", b"C <c@d>"
    theirs.author_time = theirs.commit_time = 1700000000
    theirs.author_timezone = theirs.commit_timezone = 0
    theirs.encoding, theirs.message = b"UTF-8", b"imm(x): y\n\nLanes-Batch: z\n"
    assert commit == theirs.id.decode()
    git(repo, "fsck", "--no-dangling")
    info = g.odb.commit(commit)
    assert (info.tree, info.parents, info.author, info.author_time) == (tree, (), "A <a@b>", 1700000000)
    assert info.trailers == {"Lanes-Batch": "z"}
    assert g.odb.blob_at(commit, "a/x") == b"hello\n" and g.odb.entry_at(commit, "a.txt/x") is None
    assert g.odb.kind(blob) == "blob" and g.odb.kind("0" * 40) is None


def test_objects_git_writes_and_packs_are_read(repo, lean):
    (repo / "dir").mkdir()
    (repo / "dir" / "f").write_text("one\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two\n\nLanes-Task: t")
    git(repo, "gc", "-q")   # everything packed: a reader must read packs too
    g = Git(repo, lean=lean)
    head = git(repo, "rev-parse", "HEAD").strip()
    info = g.odb.commit(head)
    assert info.subject == "two" and info.trailers == {"Lanes-Task": "t"} and len(info.parents) == 1
    assert g.odb.flat(info.tree) == {"README": git(repo, "rev-parse", "HEAD:README").strip(),
                                     "dir/f": git(repo, "rev-parse", "HEAD:dir/f").strip()}
    assert g.odb.change_identity(info.parents[0], head) == {
        "dir/f": ("100644", git(repo, "rev-parse", "HEAD:dir/f").strip())}
    assert g.odb.change_identity(head, info.parents[0]) == {"dir/f": ("000000", "0" * 40)}


def test_refs_are_read_from_loose_packed_and_symbolic_refs(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-ref", "refs/notes/lanes/batch/demo", head)
    git(repo, "pack-refs", "--all")
    git(repo, "update-ref", "refs/heads/loose", head)
    g = Git(repo)
    assert g.refs.resolve("refs/notes/lanes/batch/demo") == head          # packed
    assert g.refs.resolve("refs/heads/loose") == head                      # loose
    assert g.refs.resolve("HEAD") == head                                  # symbolic, to a packed branch
    assert g.refs.resolve("refs/heads/missing") is None
    assert g.refs.resolve("refs/heads/../../config") is None
    git(repo, "update-ref", "-d", "refs/notes/lanes/batch/demo")
    assert Git(repo).refs.resolve("refs/notes/lanes/batch/demo") is None   # deleted from packed-refs


def test_lean_commands_never_import_dulwich(repo):
    code = ("import sys; from git_lanes.gitio import Git; g = Git(sys.argv[1], lean=True); "
            "h = g.refs.resolve('HEAD'); g.odb.flat(g.odb.commit(h).tree); "
            "print('dulwich' in ' '.join(sys.modules))")
    out = subprocess.run([os.sys.executable, "-c", code, str(repo)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_loose_object_is_read_from_its_file_and_a_broken_one_is_not_trusted(repo):
    from git_lanes.gitio import is_oid
    from git_lanes.gitio.readers import read_loose

    g = Git(repo)
    objects = os.path.join(g.common_dir, "objects")
    blob = git(repo, "hash-object", "-w", "--stdin", input="loose\n").strip()
    assert read_loose(objects, blob) == ("blob", b"loose\n")
    assert g.odb.reader.read(blob) == ("blob", b"loose\n")
    path = os.path.join(objects, blob[:2], blob[2:])
    os.chmod(path, 0o644)
    with open(path, "wb") as fh:
        fh.write(b"not zlib")
    assert read_loose(objects, blob) is None              # torn or tampered: never taken as the object
    # names that are not object ids never become paths, even of files that are there
    for name in ("../HEAD" + "0" * 33, blob.upper(), blob[:39], ""):
        assert not is_oid(name)
        assert read_loose(objects, name) is None
        assert not g.odb.reader.has(name)


def test_temporary_names_step_over_what_a_killed_process_of_the_same_pid_left(tmp_path):
    import threading

    from git_lanes.gitio import tempnames

    fd, path = tempnames.new_file(str(tmp_path / "fresh"), "tmp_obj_")   # a missing folder is made
    os.close(fd)
    assert os.path.dirname(path) == str(tmp_path / "fresh")
    upcoming = next(tempnames._SERIAL) + 1
    left = tmp_path / f"tmp_obj_{os.getpid()}_{threading.get_ident()}_{upcoming}"
    left.write_bytes(b"left by a killed writer")
    fd, path = tempnames.new_file(str(tmp_path), "tmp_obj_")           # its name comes up next
    os.close(fd)
    assert path == str(left)[:-len(str(upcoming))] + str(upcoming + 1)
    assert left.read_bytes() == b"left by a killed writer"
    with tempnames.new_dir(str(tmp_path), "git-lanes-index.") as folder:
        os.makedirs(os.path.join(folder, "sub"))
        open(os.path.join(folder, "index"), "w").close()
    assert not os.path.exists(folder)
