"""Issue 29 item 12 (SPEC §14, §17.2): remote loops that spend less per hop without giving up a guarantee.

A loop's push leases on what its last pull fetched instead of fetching again: a remote that moved since
fails the lease (nothing is pushed), and a diverged ref is judged again after a fresh fetch, so a stale
picture never overwrites anything nor decides what is reported. Polls are fast while this machine waits
for the other side; a wait is counted from when the pull began.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from conftest import git
from test_remote import finish, ok, refs, rogue_commit, statuses, world  # noqa: F401  (the fixture)


def session(repo: Path):
    from git_lanes.domain.session import Session

    return Session(cwd=str(repo))


def counting(monkeypatch) -> list[tuple[str, ...]]:
    """Every Git command git-lanes runs from now on (real Git runs them)."""
    from git_lanes.gitio import Git

    seen: list[tuple[str, ...]] = []
    real = Git.run

    def run(self, *args, **kw):
        seen.append(args)
        return real(self, *args, **kw)

    monkeypatch.setattr(Git, "run", run)
    return seen


def test_a_loop_push_after_a_pull_sends_without_fetching_again(world, monkeypatch):
    from git_lanes.remote.replicate import pull, push_retrying

    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    finish(repo, "b")
    pull(session(repo), "origin")
    calls = counting(monkeypatch)
    doc = push_retrying(session(repo), "origin", fetched=True)
    assert [c[0] for c in calls].count("fetch") == 0 and [c[0] for c in calls].count("push") == 1
    assert doc["attempts"] == 1
    assert statuses(doc)["refs/heads/imm/demo"] == "pushed" and refs(bare) == refs(repo)
    # without `fetched` (the `git lanes push` command) it fetches first, as before
    calls.clear()
    push_retrying(session(repo), "origin")
    assert [c[0] for c in calls].count("fetch") == 1


def test_a_stale_picture_never_overwrites_a_ref_that_moved_on_the_remote(world):
    """The tracking namespace is older than the remote: the lease on the old value fails the atomic
    push (nothing goes), then a pull and a fresh push report the moved ref diverged and send the rest."""
    from git_lanes.remote.replicate import pull, push_retrying

    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    pull(session(repo), "origin")
    raced = "refs/notes/lanes/evidence"
    rogue = rogue_commit(bare, raced)                  # after our last fetch: our picture is stale
    finish(repo, "b")
    doc = push_retrying(session(repo), "origin", fetched=True)
    assert doc["attempts"] == 2, doc
    assert statuses(doc)[raced] == "remote_moved" and refs(bare)[raced] == rogue
    for ref in ("refs/notes/lanes/batch/demo", "refs/heads/imm/demo"):
        assert statuses(doc)[ref] == "pushed" and refs(bare)[ref] == refs(repo)[ref]


def test_a_ref_the_stale_picture_calls_diverged_is_judged_again_after_a_fresh_fetch(world):
    """Someone rewrote a ref there and then put it back: the stale picture holds the rogue value (the
    ref looks diverged), the remote holds ours again. The fresh look reports it up to date."""
    from git_lanes.remote.replicate import pull, push_retrying

    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    ref = "refs/notes/lanes/batch/demo"
    ours = refs(bare)[ref]
    rogue_commit(bare, ref)
    pull(session(repo), "origin")                      # the picture: diverged
    git(bare, "update-ref", ref, ours)                 # the remote: ours again
    doc = push_retrying(session(repo), "origin", fetched=True)
    assert doc["attempts"] == 2 and statuses(doc)[ref] == "up_to_date", doc


def worker(**kw) -> SimpleNamespace:
    base = dict(interval=2.0, changed_at=time.monotonic(), report={}, held={}, jobs=2, batch_id="b1",
                active=lambda: {}, sessions=None, interrupted=threading.Event(), last_beat=time.monotonic(),
                beat_every=100.0, progress=SimpleNamespace(draw=lambda force=False: None))
    base.update(kw)
    return SimpleNamespace(**base)


def test_a_worker_polls_fast_while_it_waits_for_a_batch_a_handoff_or_an_answer():
    from git_lanes.remote.pacing import Waiting

    running = {"batch_state": "running", "children": [{"state": "pending"}, {"state": "enrolled"}]}
    assert Waiting.pause(worker(batch_id=None)) == 0.5                       # no batch yet
    assert Waiting.pause(worker(report=running)) == 0.5                      # a free slot, a pending child
    full = {"a": 1, "b": 2}
    assert Waiting.pause(worker(report=running, held=full, active=lambda: full)) == 2.0   # both busy working
    assert Waiting.pause(worker(report=running, held=full, active=lambda: {"a": 1})) == 0.5   # b waits
    done = {"batch_state": "running", "children": [{"state": "enrolled"}]}
    assert Waiting.pause(worker(report=done)) == 2.0                         # nothing left to hand out
    assert Waiting.pause(worker(batch_id=None, changed_at=time.monotonic() - 11)) == 2.0   # 10 s: slow again


def test_a_wait_counts_from_when_the_pull_began():
    from git_lanes.remote.pacing import Waiting

    w = worker(batch_id=None)
    w.pause = lambda: Waiting.pause(w)
    w._ended = lambda timeout: Waiting._ended(w, timeout)
    t = time.monotonic()
    Waiting.wait(w, since=t - 0.4)                      # the round took 0.4 s of the 0.5 s pause
    assert time.monotonic() - t < 0.3
    t = time.monotonic()
    Waiting.wait(w, since=t - 5)                        # a round longer than the pause: poll at once
    assert time.monotonic() - t < 0.1
    t = time.monotonic()
    Waiting.wait(w)                                     # a wait of its own: the whole pause
    assert time.monotonic() - t >= 0.45


def test_ancestry_is_read_here_when_near_and_asked_of_git_when_far(repo, monkeypatch):
    from git_lanes.gitio import Git
    from git_lanes.gitio.ancestry import LIMIT

    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    chain = [git(repo, "rev-parse", "HEAD").strip()]
    for n in range(LIMIT + 5):   # a long first-parent line, written without a worktree
        chain.append(git(repo, "commit-tree", tree, "-p", chain[-1], "-m", str(n)).strip())
    side = git(repo, "commit-tree", tree, "-m", "unrelated").strip()
    merge = git(repo, "commit-tree", tree, "-p", chain[3], "-p", side, "-m", "merge").strip()
    g = Git(str(repo))
    calls = counting(monkeypatch)
    assert g.odb.is_ancestor(chain[-3], chain[-1]) and g.odb.is_ancestor(side, merge)   # near: read here
    assert not g.odb.is_ancestor(chain[-1], chain[0]) and not g.odb.is_ancestor(side, chain[5])  # roots reached
    assert not g.odb.is_ancestor(merge, chain[3])
    assert [c for c in calls if c[0] == "merge-base"] == []
    assert g.odb.is_ancestor(chain[0], chain[-1])                    # far: Git answers
    assert not g.odb.is_ancestor(side, chain[-1])
    assert len([c for c in calls if c[0] == "merge-base"]) == 2
    assert g.odb.is_ancestor(chain[0], chain[-1]) and not g.odb.is_ancestor(side, chain[-1])   # kept
    assert len([c for c in calls if c[0] == "merge-base"]) == 2
    assert g.refs.under("refs/heads", "refs/tags") == {"refs/heads/main": chain[0]}


def test_an_idle_pull_judges_nothing_again_and_a_change_is_judged(world, monkeypatch):
    from git_lanes.remote.replicate import pull

    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    s = session(repo)
    first = pull(s, "origin")
    assert set(statuses(first).values()) == {"up_to_date"}
    calls = counting(monkeypatch)
    again = pull(s, "origin")
    assert again["refs"] == first["refs"]
    assert sorted(c[0] for c in calls) == ["fetch", "for-each-ref", "for-each-ref"]   # fetch, seen, local
    rogue = rogue_commit(bare, "refs/notes/lanes/evidence")   # the remote changed: judged, not repeated
    changed = pull(session(repo), "origin")
    assert statuses(changed)["refs/notes/lanes/evidence"] == "remote_moved"
    assert changed["refs"] != first["refs"] and refs(bare)["refs/notes/lanes/evidence"] == rogue
