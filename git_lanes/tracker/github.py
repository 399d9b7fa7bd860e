"""GitHub issues behind the tracker port (SPEC §11), standard library only.

Four endpoints, nothing else: GET the issue, GET its comments (paginated), POST our marker
comment, PATCH the issue closed. Order is marker first, close second, so a crash in between is
finished by the next attempt instead of looking ambiguous. Closed issues are never reopened or
edited. The token is sent only as `Authorization: Bearer …`, redirects are refused so it never
travels elsewhere, and it is scrubbed from every message.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from git_lanes import __version__
from git_lanes.core.redact import redact, secret_values
from git_lanes.tracker import (ALREADY_CURRENT, AMBIGUOUS_REMOTE_STATE, PERMANENT_FAILURE, RETRYABLE_FAILURE, UPDATED,
                               TrackerResult, marker)

DEFAULT_API_URL = "https://api.github.com"
PER_PAGE = 100
MAX_PAGES = 100
NO_TOKEN = "no GH_TOKEN/GITHUB_TOKEN"
MAX_MESSAGE = 300   # characters of a tracker message, counted after redaction

_REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class _Stop(Exception):
    """Ends an attempt early with a status and a message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: a 3xx surfaces as an HTTP error and the token stays put."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class GitHubTracker:
    """Closes GitHub issues for integrated children; see the module docstring."""

    def __init__(self, api_url: str = DEFAULT_API_URL, token: str | None = None,
                 timeout: float = 10.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self._token = token.strip() if token and token.strip() else None
        self._opener = urllib.request.build_opener(_NoRedirect)

    def __repr__(self) -> str:
        token = "***" if self._token else None
        return f"GitHubTracker(api_url={self.api_url!r}, token={token!r}, timeout={self.timeout!r})"

    def close_issue(self, repo: str, number: int, batch_id: str, task_id: str) -> TrackerResult:
        """Close `repo#number` for `batch_id`/`task_id`; never raises for remote trouble."""
        try:
            status, message = self._close(repo, number, batch_id, task_id)
        except _Stop as stop:
            status, message = stop.status, stop.message
        return TrackerResult(status, self._scrub(message))

    # -- the algorithm -------------------------------------------------------------------------

    def _close(self, repo: str, number: int, batch_id: str, task_id: str) -> tuple[str, str]:
        self._validate(repo, number)
        where = f"{repo}#{number}"
        path = f"/repos/{repo}/issues/{number}"
        mark = marker(batch_id, task_id)

        issue = self._call("GET", path, f"GET issue {number}")
        if not isinstance(issue, dict) or issue.get("state") not in ("open", "closed"):
            raise _Stop(PERMANENT_FAILURE, f"GET issue {number}: unexpected response")
        if issue.get("pull_request"):
            raise _Stop(PERMANENT_FAILURE, f"{where} is a pull request, not an issue")

        count = self._count_markers(path, number, mark)
        if count > 1:
            return AMBIGUOUS_REMOTE_STATE, (
                f"{where} has {count} markers for {batch_id}/{task_id}; left untouched")
        if issue["state"] == "closed":
            reason = issue.get("state_reason") or "none"
            if count == 1 and reason == "completed":
                return ALREADY_CURRENT, f"{where} already closed by git-lanes ({batch_id}/{task_id})"
            how = "without our marker" if count == 0 else "with our marker but not as completed"
            return AMBIGUOUS_REMOTE_STATE, (
                f"{where} is closed (state_reason {reason}) {how}; left untouched")

        if count == 0:
            body = (f"{mark}\nClosed by git-lanes: task `{task_id}` was integrated "
                    f"in batch `{batch_id}`.")
            self._call("POST", f"{path}/comments", f"POST comment on issue {number}", {"body": body})
        closed = self._call("PATCH", path, f"PATCH issue {number}",
                            {"state": "closed", "state_reason": "completed"})
        if isinstance(closed, dict) and closed.get("state", "closed") != "closed":
            return AMBIGUOUS_REMOTE_STATE, f"PATCH issue {number}: issue is still {closed['state']}"
        return UPDATED, f"closed {where} as completed"

    def _validate(self, repo: object, number: object) -> None:
        if not self._token:
            raise _Stop(PERMANENT_FAILURE, NO_TOKEN)
        if not _VISIBLE_ASCII.fullmatch(self._token):
            raise _Stop(PERMANENT_FAILURE, "GH_TOKEN/GITHUB_TOKEN contains invalid characters")
        url = urllib.parse.urlsplit(self.api_url)
        if (url.scheme not in ("http", "https") or not url.netloc
                or not _VISIBLE_ASCII.fullmatch(self.api_url)):
            raise _Stop(PERMANENT_FAILURE, f"invalid lanes.githubApiUrl: {self.api_url!r}")
        if (not isinstance(repo, str) or not _REPO_RE.fullmatch(repo)
                or any(part in (".", "..") for part in repo.split("/"))):
            raise _Stop(PERMANENT_FAILURE, f"invalid tracker repo {repo!r}: expected owner/name")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise _Stop(PERMANENT_FAILURE, f"invalid issue number {number!r}")

    def _count_markers(self, path: str, number: int, mark: str) -> int:
        count = 0
        for page in range(1, MAX_PAGES + 1):
            step = f"GET comments of issue {number} (page {page})"
            items = self._call("GET", f"{path}/comments?per_page={PER_PAGE}&page={page}", step)
            if not isinstance(items, list):
                raise _Stop(PERMANENT_FAILURE, f"{step}: unexpected response")
            count += sum(1 for c in items if isinstance(c, dict) and mark in str(c.get("body") or ""))
            if len(items) < PER_PAGE:
                return count
        raise _Stop(AMBIGUOUS_REMOTE_STATE,
                    f"issue {number} has more than {MAX_PAGES * PER_PAGE} comments; marker unknown")

    # -- HTTP ----------------------------------------------------------------------------------

    def _call(self, method: str, path: str, step: str, body: object = None) -> object:
        """One request; returns the decoded JSON or raises `_Stop` with the mapped status."""
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"git-lanes/{__version__}",
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.api_url + path, data=data, method=method,
                                         headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            raise _http_stop(step, err) from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise _Stop(RETRYABLE_FAILURE, f"{step}: timed out after {self.timeout}s") from None
            raise _Stop(RETRYABLE_FAILURE, f"{step}: connection failed ({err.reason})") from None
        except TimeoutError:
            raise _Stop(RETRYABLE_FAILURE, f"{step}: timed out after {self.timeout}s") from None
        except (OSError, http.client.HTTPException) as err:
            raise _Stop(RETRYABLE_FAILURE,
                        f"{step}: connection failed ({type(err).__name__}: {err})") from None
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            raise _Stop(RETRYABLE_FAILURE, f"{step}: response is not JSON") from None

    def _scrub(self, message: str) -> str:
        """One line without the token or any other secret, cut only after that (SPEC §2.1 v3)."""
        message = " ".join(redact(message, secret_values(extra=[self._token or ""])).split())
        return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def _http_stop(step: str, err: urllib.error.HTTPError) -> _Stop:
    """Map an HTTP error status to a tracker status (SPEC §11)."""
    code = err.code
    headers = err.headers or {}
    limited = code == 429 or (
        code == 403 and str(headers.get("X-RateLimit-Remaining", "")).strip() == "0")
    detail = "rate limited" if limited else _github_message(err)
    status = RETRYABLE_FAILURE if limited or code >= 500 else PERMANENT_FAILURE
    return _Stop(status, f"{step}: HTTP {code}" + (f" ({detail})" if detail else ""))


def _github_message(err: urllib.error.HTTPError) -> str:
    """GitHub's `message` from an error body, if any (cut by `_scrub`, after redaction)."""
    try:
        payload = json.loads(err.read(4096) or b"null")
    except (OSError, ValueError, http.client.HTTPException):
        return ""
    finally:
        err.close()
    text = payload.get("message") if isinstance(payload, dict) else None
    return " ".join(str(text).split()) if text else ""


def from_env(api_url: str = DEFAULT_API_URL, environ: Mapping[str, str] | None = None,
             timeout: float = 10.0) -> GitHubTracker:
    """A tracker whose token comes from `GH_TOKEN`, else `GITHUB_TOKEN` (blank counts as unset)."""
    env = os.environ if environ is None else environ
    token = (env.get("GH_TOKEN") or "").strip() or (env.get("GITHUB_TOKEN") or "").strip() or None
    return GitHubTracker(api_url, token, timeout)
