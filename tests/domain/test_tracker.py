"""The GitHub tracker against a real HTTP server on 127.0.0.1 imitating the four endpoints."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from git_lanes.tracker import (ALREADY_CURRENT, AMBIGUOUS_REMOTE_STATE, CLOSED_STATUSES, PERMANENT_FAILURE,
                               RETRYABLE_FAILURE, UPDATED, Tracker, TrackerResult, marker)
from git_lanes.tracker.github import GitHubTracker, from_env

TOKEN = "ghp_Zq9SECRETtokenXy7_do_not_leak"
REPO = "octo/widgets"
ISSUE = 42
BATCH, TASK = "b-20260102-1", "parser"
MARK = marker(BATCH, TASK)
ISSUE_PATH = f"/repos/{REPO}/issues/{ISSUE}"
COMMENTS_PATH = ISSUE_PATH + "/comments"


@dataclass
class Seen:
    method: str
    path: str
    query: dict
    headers: object  # case-insensitive HTTPMessage
    body: object


@dataclass
class FakeGitHub:
    """In-memory issue #42 of octo/widgets, with failure injection and a request log."""

    url: str = ""
    state: str = "open"
    state_reason: str | None = None
    comments: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    fail: dict = field(default_factory=dict)  # (method, "issue"|"comments") -> (code, headers, body)
    hang: bool = False
    release: threading.Event = field(default_factory=threading.Event)

    def issue(self) -> dict:
        return {"number": ISSUE, "state": self.state, "state_reason": self.state_reason}

    def add_comment(self, body: str) -> None:
        self.comments.append({"id": len(self.comments) + 1, "body": body})

    def writes(self) -> list[Seen]:
        return [r for r in self.requests if r.method not in ("GET", "HEAD")]

    def calls(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _send(self, code: int, payload: object, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        fake: FakeGitHub = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        url = urlsplit(self.path)
        fake.requests.append(Seen(method, url.path, parse_qs(url.query), self.headers, body))
        if fake.hang:
            fake.release.wait(10)
            return
        kind = {ISSUE_PATH: "issue", COMMENTS_PATH: "comments"}.get(url.path)
        if kind is None:
            return self._send(404, {"message": "Not Found"})
        if (method, kind) in fake.fail:
            code, headers, payload = fake.fail[(method, kind)]
            return self._send(code, payload, headers)
        if (method, kind) == ("GET", "issue"):
            return self._send(200, fake.issue())
        if (method, kind) == ("GET", "comments"):
            query = parse_qs(url.query)
            per_page = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            return self._send(200, fake.comments[(page - 1) * per_page:page * per_page])
        if (method, kind) == ("POST", "comments"):
            fake.add_comment(body["body"])
            return self._send(201, fake.comments[-1])
        if (method, kind) == ("PATCH", "issue"):
            fake.state, fake.state_reason = body["state"], body.get("state_reason")
            return self._send(200, fake.issue())
        self._send(405, {"message": "Method Not Allowed"})


@pytest.fixture
def gh(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake = FakeGitHub(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.fake = fake
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


MESSAGES: list[str] = []


def close(tracker: GitHubTracker, repo: str = REPO, number: int = ISSUE) -> TrackerResult:
    """Run one close and check the invariants every result must keep."""
    result = tracker.close_issue(repo, number, BATCH, TASK)
    MESSAGES.append(result.message)
    assert TOKEN not in result.message and TOKEN not in repr(result)
    assert "\n" not in result.message and result.message
    return result


def tracker(fake: FakeGitHub, **kwargs) -> GitHubTracker:
    return GitHubTracker(fake.url, TOKEN, **kwargs)


# -- the happy path and idempotence ---------------------------------------------------------------

def test_open_issue_is_closed_once_then_already_current(gh):
    result = close(tracker(gh))
    assert result == TrackerResult(UPDATED, f"closed {REPO}#{ISSUE} as completed")
    assert result.closed
    assert (gh.state, gh.state_reason) == ("closed", "completed")
    assert [c["body"].count(MARK) for c in gh.comments] == [1]
    assert "git-lanes" in gh.comments[0]["body"].replace(MARK, "")
    assert [(w.method, w.path) for w in gh.writes()] == [("POST", COMMENTS_PATH), ("PATCH", ISSUE_PATH)]
    assert gh.writes()[1].body == {"state": "closed", "state_reason": "completed"}

    gh.requests.clear()
    again = close(tracker(gh))
    assert again.status == ALREADY_CURRENT and again.closed
    assert gh.writes() == []
    assert len(gh.comments) == 1


def test_crash_between_comment_and_close_only_patches(gh):
    gh.add_comment("looks good")
    gh.add_comment(MARK + "\nClosed by git-lanes.")
    result = close(tracker(gh))
    assert result.status == UPDATED
    assert [(w.method, w.path) for w in gh.writes()] == [("PATCH", ISSUE_PATH)]
    assert len(gh.comments) == 2 and gh.state == "closed"


def test_rate_limited_close_is_retried_by_the_next_call(gh):
    gh.fail[("PATCH", "issue")] = (429, {"Retry-After": "1"}, {"message": "slow down"})
    first = close(tracker(gh))
    assert first.status == RETRYABLE_FAILURE and not first.closed
    assert first.message == f"PATCH issue {ISSUE}: HTTP 429 (rate limited)"
    assert gh.state == "open" and len(gh.comments) == 1

    del gh.fail[("PATCH", "issue")]
    gh.requests.clear()
    assert close(tracker(gh)).status == UPDATED
    assert [w.method for w in gh.writes()] == ["PATCH"]
    assert len(gh.comments) == 1


# -- remote states we never touch -----------------------------------------------------------------

def test_hand_closed_issue_without_marker_is_ambiguous_and_untouched(gh):
    gh.state, gh.state_reason = "closed", "completed"
    result = close(tracker(gh))
    assert result.status == AMBIGUOUS_REMOTE_STATE and not result.closed
    assert "without our marker" in result.message
    assert gh.writes() == []


def test_closed_with_marker_but_not_planned_is_ambiguous(gh):
    gh.add_comment(MARK)
    gh.state, gh.state_reason = "closed", "not_planned"
    result = close(tracker(gh))
    assert result.status == AMBIGUOUS_REMOTE_STATE
    assert "not_planned" in result.message
    assert gh.writes() == []


@pytest.mark.parametrize("state", ["open", "closed"])
def test_two_markers_are_ambiguous(gh, state):
    gh.add_comment(MARK)
    gh.add_comment("again " + MARK)
    gh.state, gh.state_reason = state, ("completed" if state == "closed" else None)
    result = close(tracker(gh))
    assert result.status == AMBIGUOUS_REMOTE_STATE
    assert "2 markers" in result.message
    assert gh.writes() == []


def test_another_batchs_marker_does_not_count(gh):
    gh.add_comment(marker("b-other", TASK))
    assert close(tracker(gh)).status == UPDATED
    assert [c["body"].count(MARK) for c in gh.comments] == [0, 1]


def test_pull_request_is_refused(gh, monkeypatch):
    monkeypatch.setattr(FakeGitHub, "issue", lambda self: {
        "number": ISSUE, "state": "open", "pull_request": {"url": "x"}})
    result = close(tracker(gh))
    assert result.status == PERMANENT_FAILURE and "pull request" in result.message
    assert gh.writes() == []


# -- pagination -----------------------------------------------------------------------------------

def test_comments_are_paginated_until_a_short_page(gh):
    for i in range(150):
        gh.add_comment(f"comment {i}")
    gh.comments[120]["body"] = MARK
    assert close(tracker(gh)).status == UPDATED
    pages = [r.query for r in gh.requests if r.path == COMMENTS_PATH and r.method == "GET"]
    assert pages == [{"per_page": ["100"], "page": ["1"]}, {"per_page": ["100"], "page": ["2"]}]
    assert [w.method for w in gh.writes()] == ["PATCH"]


def test_full_page_fetches_the_next(gh):
    for i in range(100):
        gh.add_comment(f"comment {i}")
    assert close(tracker(gh)).status == UPDATED
    pages = [r.query["page"] for r in gh.requests if r.path == COMMENTS_PATH and r.method == "GET"]
    assert pages == [["1"], ["2"]]


# -- HTTP status mapping --------------------------------------------------------------------------

@pytest.mark.parametrize(("where", "code", "headers", "status"), [
    (("GET", "issue"), 429, {}, RETRYABLE_FAILURE),
    (("GET", "issue"), 403, {"X-RateLimit-Remaining": "0"}, RETRYABLE_FAILURE),
    (("GET", "issue"), 403, {"X-RateLimit-Remaining": "12"}, PERMANENT_FAILURE),
    (("GET", "issue"), 403, {}, PERMANENT_FAILURE),
    (("GET", "issue"), 401, {}, PERMANENT_FAILURE),
    (("GET", "issue"), 404, {}, PERMANENT_FAILURE),
    (("GET", "issue"), 410, {}, PERMANENT_FAILURE),
    (("GET", "issue"), 500, {}, RETRYABLE_FAILURE),
    (("GET", "issue"), 503, {}, RETRYABLE_FAILURE),
    (("GET", "comments"), 502, {}, RETRYABLE_FAILURE),
    (("POST", "comments"), 422, {}, PERMANENT_FAILURE),
    (("POST", "comments"), 403, {"X-RateLimit-Remaining": "0"}, RETRYABLE_FAILURE),
    (("PATCH", "issue"), 422, {}, PERMANENT_FAILURE),
    (("PATCH", "issue"), 500, {}, RETRYABLE_FAILURE),
])
def test_http_errors_map_to_statuses(gh, where, code, headers, status):
    gh.fail[where] = (code, headers, {"message": "Nope"})
    result = close(tracker(gh))
    assert result.status == status
    assert f"HTTP {code}" in result.message
    assert result.message.startswith(where[0])
    if where == ("GET", "issue"):
        assert gh.writes() == []
    if where == ("POST", "comments"):
        assert [w.method for w in gh.writes()] == ["POST"]  # never closed without the marker


def test_message_names_the_step(gh):
    gh.fail[("GET", "issue")] = (404, {}, {"message": "Not Found"})
    assert close(tracker(gh)).message == f"GET issue {ISSUE}: HTTP 404 (Not Found)"


def test_redirects_are_not_followed(gh):
    gh.fail[("GET", "issue")] = (301, {"Location": "http://127.0.0.1:9/elsewhere"}, {})
    result = close(tracker(gh))
    assert result.status == PERMANENT_FAILURE and "HTTP 301" in result.message
    assert len(gh.requests) == 1


def test_unanswered_request_times_out_as_retryable(gh):
    gh.hang = True
    started = time.monotonic()
    result = close(tracker(gh, timeout=0.5))
    assert time.monotonic() - started < 3
    assert result.status == RETRYABLE_FAILURE
    assert result.message == f"GET issue {ISSUE}: timed out after 0.5s"


def test_connection_refused_is_retryable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = close(GitHubTracker(f"http://127.0.0.1:{port}", TOKEN, timeout=2))
    assert result.status == RETRYABLE_FAILURE
    assert result.message.startswith(f"GET issue {ISSUE}: connection failed")


# -- inputs, token and headers --------------------------------------------------------------------

def test_no_token_is_permanent_without_any_request(gh):
    for t in (GitHubTracker(gh.url), GitHubTracker(gh.url, "  "), from_env(gh.url, {})):
        result = close(t)
        assert result == TrackerResult(PERMANENT_FAILURE, "no GH_TOKEN/GITHUB_TOKEN")
    assert gh.requests == []


def test_from_env_prefers_gh_token(gh):
    close(from_env(gh.url, {"GH_TOKEN": "gh-one", "GITHUB_TOKEN": "gh-two"}))
    close(from_env(gh.url + "/", {"GH_TOKEN": "", "GITHUB_TOKEN": "gh-two"}))
    assert [r.headers["Authorization"] for r in gh.requests][:1] == ["Bearer gh-one"]
    assert gh.requests[-1].headers["Authorization"] == "Bearer gh-two"


def test_from_env_reads_os_environ(gh, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert close(from_env(gh.url)).status == UPDATED


def test_request_headers(gh):
    close(tracker(gh))
    assert len(gh.requests) == 4
    for request in gh.requests:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert request.headers["Accept"] == "application/vnd.github+json"
        assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"
        assert request.headers["User-Agent"].startswith("git-lanes/")


def test_trailing_slash_in_base_url(gh):
    assert close(GitHubTracker(gh.url + "/", TOKEN)).status == UPDATED
    assert all(r.path.startswith("/repos/") for r in gh.requests)


@pytest.mark.parametrize(("repo", "number"), [
    ("widgets", ISSUE), ("octo/widgets/x", ISSUE), ("octo/..", ISSUE), ("octo/wid gets", ISSUE),
    ("", ISSUE), (REPO, 0), (REPO, -1), (REPO, True),
])
def test_invalid_repo_or_number_is_permanent(gh, repo, number):
    result = close(tracker(gh), repo, number)
    assert result.status == PERMANENT_FAILURE
    assert gh.requests == []


def test_invalid_base_url_is_permanent():
    assert close(GitHubTracker("file:///etc/passwd", TOKEN)).status == PERMANENT_FAILURE


def test_token_never_appears(gh):
    # GitHub echoing the token back, a token header would choke on, and everything seen so far.
    gh.fail[("GET", "issue")] = (401, {}, {"message": f"Bad credentials {TOKEN}"})
    echoed = close(tracker(gh))
    assert echoed.status == PERMANENT_FAILURE and "***" in echoed.message
    bad = GitHubTracker(gh.url, TOKEN + "\nX-Evil: 1")
    assert close(bad).status == PERMANENT_FAILURE
    assert "\nX-Evil" not in repr(bad) and TOKEN not in repr(bad) and TOKEN not in repr(tracker(gh))
    assert MESSAGES and not any(TOKEN in m for m in MESSAGES)


# -- the port -------------------------------------------------------------------------------------

def test_port_shape():
    assert marker("b1", "t1") == "<!-- git-lanes:terminal-event=b1/t1 -->"
    assert CLOSED_STATUSES == ("updated", "already_current")
    assert isinstance(GitHubTracker(), Tracker)
    with pytest.raises(ValueError):
        TrackerResult("closed", "x")
    with pytest.raises(AttributeError):
        TrackerResult(UPDATED, "x").status = "y"  # type: ignore[misc]
