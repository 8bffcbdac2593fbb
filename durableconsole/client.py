"""A Python client for agents: submit plans to Durable Console and learn of
decisions without a poll loop.

    from durableconsole.client import Console

    console = Console("https://console.example.com", token)
    plan = console.submit("Refund order A-1001", [
        {"key": "refund", "action": "refunds.refund", "args": {"order_id": "A-1001", "amount_cents": 1250}},
    ], submission_key="refund-A-1001")
    decided = console.wait(plan["id"], until="decision", timeout=3600)
    if decided["decision"] == "approved":
        done = console.wait(plan["id"], until="terminal")

It needs only `requests` (no Django, no settings), and answers with the
API's JSON as plain dicts, so that fields the server adds later reach the
caller unchanged. Failures are typed: `Invalid` (with `.errors`, the field
errors keyed by path, e.g. `steps.0.args.title`), `Forbidden`, `NotFound`,
`Conflict` and `Unavailable`, all `ConsoleError`s.

Every call this client makes is safe to repeat, so each is retried on a
connection error or a 429, 502, 503 or 504 answer, `retries` times, with
exponential backoff and full jitter, honouring `Retry-After`. A submission
is safe to repeat because of its `submission_key`: the same key with the
same plan answers with the same workflow. When none is given, the call
makes one and keeps it across its own retries; pass your own when the
submission must also survive a restart of your process.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import requests
import requests.auth

__all__ = ["Console", "ConsoleError", "Invalid", "Forbidden", "NotFound", "Conflict", "Unavailable"]

# What `wait(until="terminal")` waits for (docs/explanation/agents.md#waiting): the end states
# and those that need a person.
TERMINAL = frozenset(
    {"COMPLETE", "REJECTED", "EXPIRED", "CANCELLED", "FAILED", "NEEDS_ATTENTION", "COMPENSATED", "COMPENSATION_FAILED"}
)
# The longest wait the server holds a request for.
SERVER_WAIT_SECONDS = 60
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Dead letters per request (the API's largest page).
PAGE_SIZE = 200


class ConsoleError(Exception):
    """An answer the call cannot go on from. `status` is the HTTP status
    (None when no answer came), `code` and `message` the API's error."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.status, self.code = message, status, code

    def __str__(self) -> str:
        head = " ".join(str(part) for part in (self.status, self.code) if part)
        return f"{head}: {self.message}" if head else self.message


class Invalid(ConsoleError):
    """The request was refused as it stands (400, 413): `errors` maps each
    field's path to what is wrong with it. Nothing was stored."""

    def __init__(self, message: str, *, errors: dict[str, str] | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.errors = dict(errors or {})

    def __str__(self) -> str:
        fields = "; ".join(f"{path}: {problem}" for path, problem in self.errors.items())
        return f"{super().__str__()} ({fields})" if fields else super().__str__()


class Forbidden(ConsoleError):
    """The token is missing, unknown or revoked (401), or its role may not do this (403)."""


class NotFound(ConsoleError):
    """No such object, or none this token may see (404)."""


class Conflict(ConsoleError):
    """The object's state does not allow it, or the submission key was used
    for another plan (409)."""


class Unavailable(ConsoleError):
    """No answer (connection refused, reset or timed out), or the server
    said it cannot answer now (429, 502, 503, 504), after the retries.
    `retry_after` is the server's `Retry-After` in seconds, when it sent one."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


_ERRORS = {400: Invalid, 413: Invalid, 401: Forbidden, 403: Forbidden, 404: NotFound, 409: Conflict}


def _retry_after(response: requests.Response) -> float | None:
    """`Retry-After` as seconds from now: a number, or an HTTP date."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _error(response: requests.Response) -> ConsoleError:
    if response.is_redirect:
        # Not followed: a redirect would turn a submission into a GET, or carry the token elsewhere.
        return ConsoleError(
            f"redirected to {response.headers.get('Location')}: give Console that address", status=response.status_code
        )
    try:
        body = response.json()["error"]
        message, code, fields = str(body["message"]), body.get("code"), body.get("fields")
    except (ValueError, KeyError, TypeError):
        message, code, fields = (response.text[:500] or response.reason or "no message"), None, None
    kind = _ERRORS.get(response.status_code)
    if kind is Invalid:
        return Invalid(
            message, status=response.status_code, code=code, errors=fields if isinstance(fields, dict) else None
        )
    if kind is not None:
        return kind(message, status=response.status_code, code=code)
    if response.status_code in RETRY_STATUSES:
        return Unavailable(message, status=response.status_code, code=code, retry_after=_retry_after(response))
    return ConsoleError(message, status=response.status_code, code=code)


def _seconds(deadline: int | timedelta) -> int:
    if isinstance(deadline, timedelta):
        seconds = deadline.total_seconds()
        if seconds != int(seconds):
            raise ValueError(f"deadline must be whole seconds; got {deadline}")
        return int(seconds)
    if isinstance(deadline, bool) or not isinstance(deadline, int):
        raise TypeError(f"deadline is seconds (an int) or a timedelta; got {deadline!r}")
    return deadline


class Console:
    """One console, called with one bearer token (`manage.py issue_token`).

    `timeout` bounds connecting and each read (a wait adds its own
    seconds); `retries` is how many times a call is repeated after a
    connection error or a 429/502/503/504, sleeping a random time up to
    `backoff` × 2^n seconds (at most `max_backoff`), or what `Retry-After`
    asks. A `Retry-After` longer than `max_backoff` is not slept through:
    `Unavailable` says it (`.retry_after`) at once.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ):
        if retries < 0 or timeout <= 0 or backoff < 0 or max_backoff < 0:
            raise ValueError("timeout must be positive; retries, backoff and max_backoff not negative")
        self.url = url.rstrip("/")
        self.timeout, self.retries, self.backoff, self.max_backoff = timeout, retries, backoff, max_backoff
        self._session = requests.Session()
        # As the session's auth, the token is the only credential sent: requests
        # reads ~/.netrc only for a session without one. Proxies and CA
        # bundles still come from the environment.
        self._session.auth = _Bearer(token)
        self._session.headers.update({"Accept": "application/json", "User-Agent": "durableconsole-client/1"})

    def __repr__(self) -> str:
        return f"Console({self.url!r})"

    def close(self) -> None:
        """Close its connections now. (Closing the session alone leaves each
        connection pool to the garbage collector, which an exception the
        caller keeps, holding an answer from that pool, holds off.)"""
        for adapter in self._session.adapters.values():
            pools = adapter.poolmanager.pools
            for key in pools.keys():
                pools[key].close()
        self._session.close()

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- plans ------------------------------------------------------------------

    def submit(
        self,
        name: str,
        steps: list[dict],
        *,
        submission_key: str | None = None,
        context: dict | None = None,
        callback_url: str | None = None,
        deadline: int | timedelta | None = None,
    ) -> dict:
        """Submit a plan; nothing runs until a reviewer approves it. Answers
        with the workflow (`status` PLANNED). Submitting the same plan with
        the same `submission_key` again answers with the same workflow; the
        same key with another plan is a `Conflict`. `deadline` (seconds or a
        timedelta) is how long the plan may wait for approval and run.
        `callback_url` is sent only when given: a server without signed
        webhooks (docs/explanation/agents.md#webhooks) ignores it."""
        body: dict[str, Any] = {
            "name": name,
            "submission_key": submission_key or f"client-{uuid.uuid4()}",
            "steps": steps,
        }
        if context is not None:
            body["context"] = context
        if callback_url is not None:
            body["callback_url"] = callback_url
        if deadline is not None:
            body["deadline_seconds"] = _seconds(deadline)
        return self._call("POST", "/workflows", json=body)

    def get(self, workflow_id: str) -> dict:
        """The workflow with its steps and their attempts."""
        return self._call("GET", f"/workflows/{_segment(workflow_id)}")

    def wait(self, workflow_id: str, until: str = "decision", timeout: float | None = None) -> dict:
        """Wait until the workflow has a decision (`until="decision"`: any
        status but PLANNED) or has come to a stop (`"terminal"`: one of
        `TERMINAL`, including the states that need a person), and answer
        with it: the workflow plus `decision` (approved, rejected, expired,
        cancelled, or None while undecided). After `timeout` seconds
        (rounded up to whole seconds; None: no limit) it answers with the
        workflow as it stands. The server holds each request for at most
        60 s; this asks again until the point or the timeout is reached."""
        if until not in ("decision", "terminal"):
            raise ValueError(f"until is 'decision' or 'terminal'; got {until!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds or None; got {timeout!r}")
        path = f"/workflows/{_segment(workflow_id)}/wait"
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SERVER_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
            seconds = max(1, min(SERVER_WAIT_SECONDS, math.ceil(left)))
            workflow = self._call(
                "GET", path, params={"until": until, "timeout": seconds}, read_timeout=seconds + self.timeout
            )
            status = workflow.get("status")
            done = status != "PLANNED" if until == "decision" else status in TERMINAL
            if done or (deadline is not None and time.monotonic() >= deadline):
                return workflow

    # --- what the console offers --------------------------------------------------

    def actions(self) -> list[dict]:
        """The installed actions, each with its flags and `args_schema` (a JSON Schema)."""
        return self._call("GET", "/actions")["items"]

    def dead_letters(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        action: str | None = None,
        failure_class: str | None = None,
        limit: int | None = None,
    ) -> list[dict]:
        """Dead letters, newest first, filtered as the API's list is
        (`status` OPEN, REPLAYED, DISCARDED, ...; `failure_class` e.g.
        TRANSIENT), every page of them or the first `limit`."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1 or None; got {limit!r}")
        params = {
            name: value
            for name, value in (
                ("workflow", workflow),
                ("status", status),
                ("action", action),
                ("failure_class", failure_class),
            )
            if value is not None
        }
        params["limit"] = min(limit or PAGE_SIZE, PAGE_SIZE)
        found: list[dict] = []
        while True:
            page = self._call("GET", "/dead-letters", params=params)
            found.extend(page["items"])
            if limit is not None and len(found) >= limit:
                return found[:limit]
            if not page.get("next"):
                return found
            params["cursor"] = page["next"]

    # --- one call, with its retries -------------------------------------------------

    def _call(
        self, method: str, path: str, *, params: dict | None = None, json: Any = None, read_timeout: float | None = None
    ) -> Any:
        url = f"{self.url}/api/v1{path}"
        attempt = 0
        while True:
            retry_after = None
            try:
                response = self._session.request(
                    method,
                    url,
                    params=params,
                    json=json,
                    allow_redirects=False,
                    timeout=(self.timeout, read_timeout or self.timeout),
                )
            except requests.RequestException as exc:
                if attempt == self.retries:
                    raise Unavailable(
                        f"{method} {path}: no answer from {self.url} after {attempt + 1} "
                        f"attempt(s): {type(exc).__name__}"
                    ) from exc
            else:
                retry_after = _retry_after(response)
                if not self._worth_retrying(response, attempt, retry_after):
                    return _answer(response, method, path)
            time.sleep(self._delay(attempt, retry_after))
            attempt += 1

    def _worth_retrying(self, response: requests.Response, attempt: int, retry_after: float | None) -> bool:
        return (
            response.status_code in RETRY_STATUSES
            and attempt < self.retries
            and (retry_after is None or retry_after <= self.max_backoff)
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Full jitter over a doubling window, never sooner than `Retry-After`."""
        jittered = random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))
        return jittered if retry_after is None else max(retry_after, jittered)


def _answer(response: requests.Response, method: str, path: str) -> Any:
    if response.status_code >= 300:
        raise _error(response)
    try:
        return response.json()
    except ValueError:
        raise ConsoleError(f"{method} {path}: the answer is not JSON", status=response.status_code) from None


class _Bearer(requests.auth.AuthBase):
    def __init__(self, token: str):
        self._token = token

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request


def _segment(workflow_id: str) -> str:
    """An id as one path segment: whatever it holds, it cannot reach another endpoint."""
    return quote(str(workflow_id), safe="")
