"""The Python client (`durableconsole.client`) against a live server: an
agent submits, reads and waits; every refusal is a typed error; calls that
are safe to repeat are repeated after a lost or refused answer, through a
small real HTTP relay in front of the server that drops or refuses what a
test tells it to.
"""

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.conf import settings

from durableconsole import client as client_module
from durableconsole.client import Conflict, Console, ConsoleError, Forbidden, Invalid, NotFound, Unavailable
from tests.support.plans import ticket_plan
from workflows.models import DeadLetter, Workflow
from workflows.operations import tokens
from workflows.ops.processes import free_port
from workflows.web import waiting
from workflows.webhooks import keys as webhook_keys

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = [{"key": "s", "action": "noop", "args": {}}]


@pytest.fixture(autouse=True)
def watcher_stopped():
    """The live server's watcher runs in this process: its connection goes with each test."""
    yield
    waiting.watcher.stop()


@pytest.fixture
def console(live_server, people):
    """A client of the live server for a persona, with quick retries."""
    made = []

    def connect(persona: str, url: str | None = None, token: str | None = None, **options) -> Console:
        made.append(Console(url or live_server.url, token or tokens.issue(people[persona]), backoff=0.01, **options))
        return made[-1]

    yield connect
    for each in made:
        each.close()


class Relay(ThreadingHTTPServer):
    """A real HTTP server in front of the live server. Each request takes
    the next of `faults`, then passes: "503" answers 503 with `retry_after`
    and forwards nothing; "drop" forwards the request, then closes the
    connection without answering (the server acted, the client never
    heard). `seen` records (method, path and query, body, upstream status)."""

    daemon_threads = True

    def __init__(self, upstream: str, faults=(), retry_after: str | None = "0"):
        super().__init__(("127.0.0.1", free_port()), RelayHandler)
        self.upstream, self.faults, self.retry_after = upstream, list(faults), retry_after
        self.seen: list[tuple[str, str, bytes, int | None]] = []
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()

    def next_fault(self) -> str:
        with self.lock:
            return self.faults.pop(0) if self.faults else "pass"


class RelayHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.relay()

    def do_POST(self):
        self.relay()

    def relay(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fault = self.server.next_fault()
        if fault == "503":
            self.server.seen.append((self.command, self.path, body, None))
            self.send_response(503)
            if self.server.retry_after is not None:
                self.send_header("Retry-After", self.server.retry_after)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"code": "unavailable", "message": "try again"}}')
            return
        headers = {name: self.headers[name] for name in ("Authorization", "Content-Type") if self.headers[name]}
        upstream = requests.request(
            self.command, self.server.upstream + self.path, headers=headers, data=body, timeout=90
        )
        self.server.seen.append((self.command, self.path, body, upstream.status_code))
        if fault == "drop":
            self.close_connection = True
            return
        self.send_response(upstream.status_code)
        self.send_header("Content-Type", upstream.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(upstream.content)))
        self.end_headers()
        self.wfile.write(upstream.content)

    def log_message(self, *args):
        pass


def test_the_client_imports_without_django_or_settings():
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    script = (
        "import sys, durableconsole.client; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'workflows', 'ninja', 'pydantic'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_agent_submits_then_waits_for_the_decision_and_the_end(console, http_api, start_worker, desk):
    start_worker()
    agent = console("agent")
    plan = ticket_plan("client-1")

    submitted = agent.submit(
        plan["name"], plan["steps"], submission_key="client-1", context={"why": "test"}, deadline=3600
    )
    assert submitted["status"] == "PLANNED" and agent.get(submitted["id"])["status"] == "PLANNED"

    def decide():
        time.sleep(1.0)
        assert http_api["reviewer"].post(f"/workflows/{submitted['id']}/approve", {"comment": "go"}).ok

    deciding = threading.Thread(target=decide)
    deciding.start()
    decided = agent.wait(submitted["id"], until="decision", timeout=30)
    deciding.join()
    done = agent.wait(submitted["id"], until="terminal", timeout=60)

    assert decided["decision"] == "approved" and decided["status"] in ("APPROVED", "RUNNING", "COMPLETE")
    assert done["status"] == "COMPLETE" and done["decision"] == "approved"
    assert [step["status"] for step in done["steps"]] == ["COMPLETE"] * 3
    (ticket,) = desk.tickets()
    assert ticket["title"] == "Printer on fire" and ticket["status"] == "closed"


def test_a_bad_plan_raises_invalid_with_the_field_errors_and_stores_nothing(console):
    agent = console("agent")
    steps = [
        {"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "password=hunter2secret"}},
        {"key": "open", "action": "noop", "args": {}},
    ]

    with pytest.raises(Invalid) as refused:
        agent.submit("leaks a password", steps, deadline=60)

    assert refused.value.status == 400 and refused.value.code == "invalid"
    assert "steps.0.args.body" in refused.value.errors and "$secret" in refused.value.errors["steps.0.args.body"]
    assert "steps.0.args.body" in str(refused.value)
    with pytest.raises(Invalid) as no_steps:
        agent.submit("nothing to do", [])
    assert "steps" in no_steps.value.errors
    assert not Workflow.objects.exists()


def test_roles_and_unknown_objects_raise_forbidden_and_not_found(console):
    agent = console("agent")
    theirs = console("operator").submit("the operator's", NOOP)

    assert agent.dead_letters() == []  # an agent's own: none yet
    with pytest.raises(Forbidden) as wrong_role:
        console("reviewer").dead_letters()
    assert wrong_role.value.status == 403
    with pytest.raises(Forbidden) as no_token:
        console("agent", token="dc_not-a-real-token").get(theirs["id"])
    assert no_token.value.status == 401
    with pytest.raises(NotFound):
        agent.get(str(uuid.uuid4()))
    with pytest.raises(NotFound):  # another submitter's plan is not even there for an agent
        agent.wait(theirs["id"], timeout=1)
    with pytest.raises(NotFound):  # an id cannot reach another endpoint
        agent.get("../dead-letters")


def test_a_submission_key_answers_with_its_workflow_and_refuses_another_plan(console):
    agent = console("agent")
    first = agent.submit("once", NOOP, submission_key="same-key")

    again = agent.submit("once", NOOP, submission_key="same-key")
    with pytest.raises(Conflict) as conflict:
        agent.submit("once", [{"key": "other", "action": "noop", "args": {}}], submission_key="same-key")

    assert again["id"] == first["id"]
    assert conflict.value.status == 409 and "same-key" in conflict.value.message
    assert Workflow.objects.count() == 1


def test_a_get_refused_with_503_is_asked_again_after_its_retry_after(console, live_server):
    workflow = console("agent").submit("read me", NOOP)
    with Relay(live_server.url, faults=["503"], retry_after="1") as relay:
        agent = console("agent", url=relay.url)
        began = time.monotonic()
        found = agent.get(workflow["id"])
        elapsed = time.monotonic() - began

    assert found["id"] == workflow["id"]
    assert [(method, status) for method, _, _, status in relay.seen] == [("GET", None), ("GET", 200)]
    assert elapsed >= 1.0  # Retry-After: 1 was honoured


def test_a_submission_whose_answer_was_lost_is_sent_again_with_the_same_key(console, live_server):
    with Relay(live_server.url, faults=["drop"]) as relay:
        agent = console("agent", url=relay.url)
        workflow = agent.submit("answer lost on the way back", NOOP)  # no key given: the client makes one

    (first, second) = relay.seen
    # The server took the first one (201) and answered the retry with the same workflow (200).
    assert (first[0], first[3], second[0], second[3]) == ("POST", 201, "POST", 200)
    assert json.loads(first[2])["submission_key"] == json.loads(second[2])["submission_key"]
    assert list(Workflow.objects.values_list("pk", flat=True)) == [uuid.UUID(workflow["id"])]


def test_unavailable_after_the_retries_when_the_server_is_down_or_keeps_refusing(console, live_server):
    nobody = console("agent", url=f"http://127.0.0.1:{free_port()}", retries=2)
    with pytest.raises(Unavailable) as down:
        nobody.get(str(uuid.uuid4()))
    assert down.value.status is None and "3 attempt(s)" in down.value.message

    with Relay(live_server.url, faults=["503"] * 10) as relay:
        busy = console("agent", url=relay.url, retries=2)
        with pytest.raises(Unavailable) as refused:
            busy.submit("never lands", NOOP)
    assert refused.value.status == 503 and len(relay.seen) == 3
    assert not Workflow.objects.exists()


def test_a_retry_after_longer_than_the_backoff_allows_is_told_not_slept(console, live_server):
    with Relay(live_server.url, faults=["503"], retry_after="120") as relay:
        agent = console("agent", url=relay.url, max_backoff=5)
        began = time.monotonic()
        with pytest.raises(Unavailable) as later:
            agent.get(str(uuid.uuid4()))

    assert later.value.retry_after == pytest.approx(120) and len(relay.seen) == 1
    assert time.monotonic() - began < 2


def test_wait_answers_with_the_current_state_at_its_own_timeout(console):
    agent = console("agent")
    workflow = agent.submit("nobody decides", NOOP)

    began = time.monotonic()
    found = agent.wait(workflow["id"], until="decision", timeout=2)

    assert found["status"] == "PLANNED" and found["decision"] is None
    assert 2.0 <= time.monotonic() - began < 4.0
    with pytest.raises(ValueError):
        agent.wait(workflow["id"], until="approved")


def test_wait_asks_again_until_the_decision_when_the_server_answers_first(console, http_api, live_server, monkeypatch):
    monkeypatch.setattr(client_module, "SERVER_WAIT_SECONDS", 1)
    workflow = console("agent").submit("decided after a few server waits", NOOP)
    threading.Timer(2.5, lambda: http_api["reviewer"].post(f"/workflows/{workflow['id']}/approve")).start()

    with Relay(live_server.url) as relay:
        decided = console("agent", url=relay.url).wait(workflow["id"])

    waits = [path for method, path, _, _ in relay.seen if "/wait" in path]
    assert decided["decision"] == "approved"
    assert len(waits) >= 3 and all("timeout=1" in path and "until=decision" in path for path in waits)


def test_dead_letters_are_listed_by_filter_across_pages(console, http_api, start_worker, desk, monkeypatch):
    start_worker()
    agent, operator = console("agent"), console("operator")
    ids = []
    for n in range(2):
        workflow = agent.submit(
            f"comment on a missing ticket {n}",
            [
                {"key": "find", "action": "noop", "args": {"ticket": 999999}},
                {
                    "key": "note",
                    "action": "ticket.comment",
                    "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "hello"},
                },
            ],
        )
        assert http_api["reviewer"].post(f"/workflows/{workflow['id']}/approve").ok
        ids.append(agent.wait(workflow["id"], until="terminal", timeout=60)["id"])
    assert DeadLetter.objects.count() == 2
    monkeypatch.setattr(client_module, "PAGE_SIZE", 1)  # one per page: the client must follow `next`

    every = operator.dead_letters()
    mine = operator.dead_letters(workflow=ids[0])
    invalid = operator.dead_letters(status="OPEN", failure_class="INVALID_ARGUMENTS", action="ticket.comment")

    assert sorted(entry["workflow_id"] for entry in every) == sorted(ids)
    assert [entry["workflow_id"] for entry in mine] == [ids[0]]
    assert len(invalid) == 2 and all(entry["attempt_count"] >= 1 for entry in invalid)
    assert operator.dead_letters(failure_class="TRANSIENT") == []
    assert len(operator.dead_letters(limit=1)) == 1
    with pytest.raises(Invalid) as bad_filter:
        operator.dead_letters(failure_class="SOMETIMES")
    assert "failure_class" in bad_filter.value.errors


def test_actions_lists_what_is_installed_with_argument_schemas(console):
    listed = console("agent").actions()

    by_name = {action["name"]: action for action in listed}
    assert {"ticket.create", "ticket.close", "http.post", "email.send", "noop"} <= set(by_name)
    create = by_name["ticket.create"]
    assert create["idempotent"] is True and create["compensation"] == "ticket.close"
    assert create["args_schema"]["properties"].keys() >= {"title", "body"}
    assert by_name["email.send"]["irreversible"] is True


def test_callback_url_and_deadline_are_sent_only_when_given(console, live_server, people):
    webhook_keys.issue(user=people["agent"])  # callbacks are signed with the submitter's secret
    with Relay(live_server.url) as relay:
        agent = console("agent", url=relay.url)
        agent.submit("plain", NOOP, submission_key="plain")
        agent.submit(
            "with a callback",
            NOOP,
            submission_key="called-back",
            callback_url="https://agent.example.com/hooks",
            deadline=timedelta(hours=2),
        )

    plain, called_back = (json.loads(body) for _, _, body, _ in relay.seen)
    assert set(plain) == {"name", "submission_key", "steps"}
    assert called_back["callback_url"] == "https://agent.example.com/hooks"
    assert called_back["deadline_seconds"] == 7200
    assert Workflow.objects.get(submission_key="called-back").callback_url == "https://agent.example.com/hooks"


def test_errors_say_what_failed_without_the_token(console, people, tmp_path, monkeypatch):
    token = tokens.issue(people["agent"])
    # A ~/.netrc login for the console's host must not replace the token.
    (tmp_path / "netrc").write_text(
        "machine 127.0.0.1 login agent password not-the-token\nmachine localhost login agent password not-the-token\n"
    )
    (tmp_path / "netrc").chmod(0o600)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    agent = console("agent", token=token)

    assert agent.submit("still the token", NOOP)["submitted_by"] == "agent"
    with pytest.raises(ConsoleError) as missing:
        agent.get(str(uuid.uuid4()))

    assert "404" in str(missing.value) and token not in str(missing.value) and token not in repr(agent)
