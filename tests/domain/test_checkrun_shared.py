"""Verifiers of one process share what they passed (SPEC §8.7, §8.9): a window's verifiers are receipt
books of one process, each writing its receipts when its verification ends; a check one of them
passed on an input stands for the same check on the same input in another before that write, a
failure never does, and a pass dropped unwritten stands for nothing."""

from __future__ import annotations

import sys

from git_lanes.domain.checkrun import Spec, execute
from git_lanes.domain.receipts import SCRATCH, Receipts
from git_lanes.gitio import Git


def book(repo) -> Receipts:
    return Receipts(Git(repo), where=SCRATCH, batch_id="b1", clock=lambda: "2026-01-02T03:04:05Z",
                    warn=lambda text: None)


def counting_check(tmp_path, name: str, exit_code: int) -> Spec:
    log = tmp_path / f"{name}.log"
    code = f"open({str(log)!r}, 'a').write('ran\\n'); raise SystemExit({exit_code})"
    return Spec(id=f"t:{name}", command="", timeout=30, argv=[sys.executable, "-c", code, name], task="t")


def runs(tmp_path, name: str) -> int:
    path = tmp_path / f"{name}.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"   # the empty tree (no `inputs`: the key names the tree)


def test_a_pass_stands_for_the_same_input_in_another_verifier_before_its_receipts_are_written(repo, tmp_path):
    spec = counting_check(tmp_path, "passes", 0)
    first, second = book(repo), book(repo)
    one = execute(spec, cwd=str(repo), env={}, tree=TREE, book=first)
    two = execute(spec, cwd=str(repo), env={}, tree=TREE, book=second)
    assert one.passed and not one.cached
    assert two.passed and two.cached and two.receipt
    assert runs(tmp_path, "passes") == 1
    assert first.flush() == 1                        # written: from now on the stored receipt stands
    assert execute(spec, cwd=str(repo), env={}, tree=TREE, book=book(repo)).cached
    assert runs(tmp_path, "passes") == 1


def test_a_pass_dropped_unwritten_stands_for_nothing(repo, tmp_path):
    spec = counting_check(tmp_path, "dropped", 0)
    first = book(repo)
    assert not execute(spec, cwd=str(repo), env={}, tree=TREE, book=first).cached
    first.forget()                                   # `done` whose checks changed the delivery
    assert not execute(spec, cwd=str(repo), env={}, tree=TREE, book=book(repo)).cached
    assert runs(tmp_path, "dropped") == 2


def test_a_failure_never_stands_for_another_run(repo, tmp_path):
    spec = counting_check(tmp_path, "fails", 3)
    assert not execute(spec, cwd=str(repo), env={}, tree=TREE, book=book(repo)).passed
    again = execute(spec, cwd=str(repo), env={}, tree=TREE, book=book(repo))
    assert not again.passed and not again.cached
    assert runs(tmp_path, "fails") == 2
