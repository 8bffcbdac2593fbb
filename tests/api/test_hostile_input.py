"""No input gives a 500 (docs/explanation/trust-core.md#no-5xx-on-input): malformed or hostile input gets a 4xx
with a message and changes nothing.

These tests pin the cases found by hand (forged cursors, JSON Python
accepts but JSON and the databases do not, NUL in forms, a remote system's
absurd Retry-After); tests/api/test_hostile_walk.py walks every URL and
API operation with generated hostile requests.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.support import deciding as decide
from tests.support.hostile import HOSTILE_BODIES, plan_text
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from workflows.engine import retry
from workflows.models import Approval, Attempt, AuditEvent, DeadLetter, Workflow
from workflows.operations import plans, tokens


@pytest.mark.parametrize("body, says", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_hostile_json_is_refused_with_its_reason_and_stores_nothing(body, says, admin_api):
    before = AuditEvent.objects.count()
    raw = body.encode("utf-8", "surrogateescape")
    response = admin_api.generic("POST", "/api/v1/workflows", raw, content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert says in error["message"]
    assert Workflow.objects.count() == 0 and AuditEvent.objects.count() == before


@pytest.mark.parametrize("value", ['"60"', "60.0", "true"])
def test_a_deadline_of_the_wrong_type_is_refused_not_converted(value, admin_api):
    body = plan_text(deadline_seconds=value)
    response = admin_api.generic("POST", "/api/v1/workflows", body, content_type="application/json")
    assert response.status_code == 400
    assert "deadline_seconds" in response.json()["error"]["fields"]
    assert Workflow.objects.count() == 0


def test_the_largest_64_bit_integer_is_still_accepted(admin_api):
    body = plan_text(**{"context": f'{{"big": {2**63 - 1}, "small": {-(2**63)}}}'})
    assert admin_api.generic("POST", "/api/v1/workflows", body, content_type="application/json").status_code == 201


def with_session_cookie(client, workflow):
    client.cookies["sessionid"] = "abcdefgh\x00"
    return client.get("/")


@pytest.mark.parametrize(
    "send",
    [
        lambda c, wf: c.get("/audit/", {"actor": "a\x00"}),
        lambda c, wf: c.get("/api/v1/dead-letters", {"action": "\x00"}),
        lambda c, wf: c.post(
            f"/workflows/{wf.pk}/steps/a%00b/resolve",
            {"decision": "retry", "reason": "r"},
            HTTP_X_CSRFTOKEN=c.csrf_token,
        ),
        lambda c, wf: c.post(f"/workflows/{wf.pk}/approve", {"comment": "ok\x00"}, HTTP_X_CSRFTOKEN=c.csrf_token),
        lambda c, wf: c.post(
            f"/workflows/{wf.pk}/steps/open/resolve",
            {"decision": "retry", "reason": "\x00"},
            HTTP_X_CSRFTOKEN=c.csrf_token,
        ),
        lambda c, wf: c.post("/login/", {"username": "admin\x00", "password": "x"}, HTTP_X_CSRFTOKEN=c.csrf_token),
        with_session_cookie,
    ],
    ids=["console query", "API query", "path", "approve form", "resolve form", "login form", "cookie"],
)
def test_nul_in_a_query_path_or_form_is_a_400_and_changes_nothing(send, people, admin_console):
    admin_console.defaults["HTTP_AUTHORIZATION"] = f"Bearer {tokens.issue(people['admin'])}"
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    before = AuditEvent.objects.count()
    response = send(admin_console, workflow)
    assert response.status_code == 400
    assert "NUL" in response.content.decode()
    workflow.refresh_from_db()
    assert workflow.status == "PLANNED" and not Approval.objects.exists()
    assert AuditEvent.objects.count() == before


# --- a remote system's Retry-After ------------------------------------------


@pytest.fixture
def quick_retries(monkeypatch, settings):
    monkeypatch.setattr(retry, "BASE_SECONDS", 0.05)
    monkeypatch.setattr(retry, "CAP_SECONDS", 0.2)
    settings.ACTION_TIMEOUT_SECONDS = 2.0


def one_ticket(people):
    body = {
        "name": "one ticket",
        "submission_key": "retry-after",
        "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "b"}}],
    }
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer"])
    return workflow


def rate_limit(desk, raw_seconds: str):
    """The desk's client sends strict JSON; Infinity and NaN go as raw text, which the desk reads."""
    response = requests.post(
        f"{desk.url}/_faults",
        data=f'{{"mode": "rate_limit", "retry_after": {raw_seconds}}}',
        headers={"Content-Type": "application/json"},
        timeout=5,
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("raw_seconds", ["Infinity", "1000000000000"])
def test_a_retry_after_beyond_the_deadline_dead_letters_instead_of_overflowing(
    raw_seconds, people, desk, quick_retries
):
    rate_limit(desk, raw_seconds)
    workflow = one_ticket(people)
    assert run_until(workflow.pk, {"FAILED", "COMPLETE"}) == "FAILED"
    assert desk.faults() == []  # the desk did answer 429 with that Retry-After
    assert list(Attempt.objects.filter(step__workflow=workflow).values_list("failure_class", flat=True)) == [
        "RATE_LIMITED"
    ]
    assert DeadLetter.objects.get(workflow=workflow).failure_class == "RATE_LIMITED"
    assert desk.tickets() == []


def test_a_retry_after_of_nan_counts_as_no_header(people, desk, quick_retries):
    rate_limit(desk, "NaN")
    workflow = one_ticket(people)
    assert run_until(workflow.pk, {"FAILED", "COMPLETE"}) == "COMPLETE"
    assert desk.faults() == []
    assert list(
        Attempt.objects.filter(step__workflow=workflow).order_by("number").values_list("failure_class", flat=True)
    ) == ["RATE_LIMITED", ""]
    assert len(desk.tickets()) == 1


class NegativeRetryAfter(BaseHTTPRequestHandler):
    """A ticket desk stand-in whose first answer is 429 with `Retry-After: -5`
    (the real desk refuses a negative retry_after)."""

    answered: list[int] = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.answered:
            status, headers, body = 429, {"Retry-After": "-5"}, {"error": "slow down"}
        else:
            status, headers, body = 201, {}, {"id": 7, "title": "t", "status": "open"}
        self.answered.append(status)
        payload = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(payload))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_a_negative_retry_after_means_retry_now(people, settings, quick_retries):
    NegativeRetryAfter.answered = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), NegativeRetryAfter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.TICKET_DESK_URL = f"http://127.0.0.1:{server.server_port}"
    try:
        workflow = one_ticket(people)
        assert run_until(workflow.pk, {"FAILED", "COMPLETE"}) == "COMPLETE"
    finally:
        server.shutdown()
        server.server_close()
    assert NegativeRetryAfter.answered == [429, 201]
    first, second = Attempt.objects.filter(step__workflow=workflow).order_by("number")
    assert first.failure_class == "RATE_LIMITED"
    assert (second.started_at - first.finished_at).total_seconds() < 5


# --- the walks: every URL pattern, every API operation ----------------------
