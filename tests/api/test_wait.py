"""Waiting without polling: `GET /api/v1/workflows/{id}/wait` answers as soon
as a workflow reaches a decision or its end, or with its current state at
the timeout, through a real server: the test live server (WSGI: a thread
per waiter) and gunicorn with the ASGI front, as production starts it
(a waiter holds no thread). On neither does a waiter hold a database
connection while it waits.
"""

import os
import threading
import time

import psycopg
import pytest
from django.db import connection, connections, transaction

from tests.support import deciding as decide
from tests.support.api import HttpApi
from workflows.engine import announcements
from workflows.models import Workflow
from workflows.operations import plans
from workflows.ops.processes import WebServer, database_url
from workflows.web import waiting

pytestmark = pytest.mark.django_db(transaction=True)

WEB_THREADS = 2
POOL_MAX = WEB_THREADS + 1
ASGI_APP_NAME = "wait-test-web"


def noop_plan(key: str, **extra) -> dict:
    return {
        "name": f"plan {key}",
        "submission_key": key,
        "steps": [{"key": "s", "action": "noop", "args": {}}],
        **extra,
    }


@pytest.fixture(autouse=True)
def watcher_stopped():
    """The live server's watcher runs in this process: its connection goes with each test."""
    yield
    waiting.watcher.stop()


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        url = database_url()
    # Its pool is as large as its threads can use at once (the web threads
    # and the event loop's own thread): twelve waiters each holding a
    # connection would run it dry, and their requests would be 503s.
    env = {"DATABASE_URL": url, "WEB_THREADS": str(WEB_THREADS), "DB_POOL_MAX": str(POOL_MAX), "DEBUG": "1"}
    with WebServer(ASGI_APP_NAME, tmp_path_factory.mktemp("web"), env) as server:
        yield server


@pytest.fixture(params=["wsgi", "asgi"])
def server(request, people):
    """(kind, base URL, {persona: HttpApi}) of a real server on the test database."""
    if request.param == "wsgi":
        base = request.getfixturevalue("live_server").url
    else:
        base = request.getfixturevalue("asgi_server").url
    return request.param, base, {name: HttpApi(base, user) for name, user in people.items()}


def submit(apis, key: str, **extra) -> str:
    response = apis["agent"].post("/workflows", noop_plan(key, **extra))
    assert response.status_code == 201, response.content
    return response.json()["id"]


class Waiter(threading.Thread):
    """One agent waiting over HTTP; records when its answer arrived."""

    def __init__(self, api: HttpApi, workflow_id: str, **params):
        super().__init__(daemon=True)
        self.api, self.workflow_id, self.params = api, workflow_id, params
        self.response = self.answered_at = None
        self.started_at = time.monotonic()

    def run(self):
        self.response = self.api.session.get(
            f"{self.api.base}/workflows/{self.workflow_id}/wait", params=self.params, timeout=90
        )
        self.answered_at = time.monotonic()

    def answer(self, timeout=90) -> dict:
        self.join(timeout)
        assert self.response is not None, "the waiter got no answer"
        assert self.response.status_code == 200, self.response.content
        return self.response.json()


def approve(apis, workflow_id) -> tuple[float, float]:
    """When the reviewer's approval was sent, and when its answer came (after its commit)."""
    sent = time.monotonic()
    response = apis["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "ok"})
    assert response.status_code == 200, response.content
    return sent, time.monotonic()


def test_wait_answers_as_soon_as_a_reviewer_decides(server):
    kind, _, apis = server
    workflow_id = submit(apis, "decide-1")
    waiter = Waiter(apis["agent"], workflow_id, timeout=30)
    waiter.start()
    time.sleep(1.0)
    assert waiter.is_alive(), "the wait answered before any decision"

    _, approved_at = approve(apis, workflow_id)
    answer = waiter.answer()

    assert answer["id"] == workflow_id and answer["status"] == "APPROVED" and answer["decision"] == "approved"
    assert [step["key"] for step in answer["steps"]] == ["s"]  # the shape of GET
    # Announced on PostgreSQL, read every 0.25 s on SQLite: well inside a second either way.
    assert waiter.answered_at - approved_at < 1.0, (kind, waiter.answered_at - approved_at)


def test_wait_answers_with_the_current_state_at_its_timeout(server):
    _, _, apis = server
    workflow_id = submit(apis, "timeout-1")

    began = time.monotonic()
    response = apis["agent"].get(f"/workflows/{workflow_id}/wait", until="terminal", timeout=1)
    elapsed = time.monotonic() - began

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "PLANNED" and response.json()["decision"] is None
    assert 1.0 <= elapsed < 3.0


@pytest.mark.parametrize(
    "params, field",
    [
        ({"until": "approved"}, "until"),
        ({"until": ""}, "until"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": 61}, "timeout"),
        ({"timeout": "soon"}, "timeout"),
        ({"timeout": -5}, "timeout"),
    ],
)
def test_wait_refuses_a_bad_until_or_timeout_with_the_field(api, params, field):
    workflow_id = plans.submit(api["agent"].user, noop_plan("bad-params")).workflow.pk

    began = time.monotonic()
    response = api["agent"].get(f"/workflows/{workflow_id}/wait", **params)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid" and field in response.json()["error"]["fields"]
    # Refused at once, not after a wait (of DEFAULT_SECONDS, or the timeout asked for).
    assert time.monotonic() - began < waiting.DEFAULT_SECONDS / 2
    assert Workflow.objects.get(pk=workflow_id).status == "PLANNED"


def test_agents_wait_only_on_their_own_workflows(api, client):
    theirs = plans.submit(api["operator"].user, noop_plan("theirs")).workflow.pk

    assert api["agent"].get(f"/workflows/{theirs}/wait", timeout=1).status_code == 404
    assert client.get(f"/api/v1/workflows/{theirs}/wait", {"timeout": 1}).status_code == 401
    assert api["auditor"].get(f"/workflows/{theirs}/wait", timeout=1).json()["decision"] is None


def test_wait_for_the_end_answers_with_the_decision_from_the_records(server, start_worker):
    kind, _, apis = server
    start_worker()
    workflow_id = submit(apis, "end-1")
    waiter = Waiter(apis["agent"], workflow_id, until="terminal", timeout=60)
    waiter.start()
    time.sleep(0.5)

    approve(apis, workflow_id)
    answer = waiter.answer()

    # The status has moved on past the approval; the decision is still the one recorded.
    assert answer["status"] == "COMPLETE" and answer["decision"] == "approved"
    assert answer["steps"][0]["status"] == "COMPLETE"
    began = time.monotonic()
    again = apis["agent"].get(f"/workflows/{workflow_id}/wait", timeout=30)
    assert again.json()["decision"] == "approved" and time.monotonic() - began < 1.0  # reached: no wait


@pytest.mark.parametrize("outcome", ["rejected", "expired"])
def test_a_plan_rejected_or_expired_ends_the_wait_with_that_decision(server, start_worker, outcome):
    _, _, apis = server
    if outcome == "expired":
        start_worker()  # its loop expires overdue plans
    workflow_id = submit(apis, f"{outcome}-1", **({"deadline_seconds": 2} if outcome == "expired" else {}))
    waiter = Waiter(apis["agent"], workflow_id, until="terminal", timeout=30)
    waiter.start()
    time.sleep(0.5)

    if outcome == "rejected":
        response = apis["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        assert response.status_code == 200, response.content
    answer = waiter.answer()

    assert answer["status"] == outcome.upper() and answer["decision"] == outcome
    assert waiter.answered_at - waiter.started_at < 15


def test_a_handful_of_concurrent_waiters_are_each_answered_after_their_own_decision(server):
    kind, _, apis = server
    ids = [submit(apis, f"many-{n}") for n in range(6)]
    waiters = [Waiter(apis["agent"], workflow_id, timeout=30) for workflow_id in ids]
    for waiter in waiters:
        waiter.start()
    time.sleep(1.0)

    approvals_made = []
    for workflow_id in ids:
        approvals_made.append(approve(apis, workflow_id))
        time.sleep(0.3)
    answers = [waiter.answer() for waiter in waiters]

    assert [answer["id"] for answer in answers] == ids
    assert all(answer["decision"] == "approved" for answer in answers)
    for waiter, (sent, approved) in zip(waiters, approvals_made):
        # Each answered after its own approval (not with a neighbour's), and soon after.
        assert sent < waiter.answered_at < approved + 1.0, (kind, sent, approved, waiter.answered_at)


def _database_sessions(application_name: str | None) -> int:
    """Sessions on the test database: the server's own (by application
    name), or else every session but the server's."""
    with connection.cursor() as cursor:
        if application_name:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                [application_name],
            )
        else:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name <> %s",
                [ASGI_APP_NAME],
            )
        return cursor.fetchone()[0]


def test_waiters_hold_no_database_connection_while_they_wait(server):
    kind, _, apis = server
    if connection.vendor != "postgresql":
        pytest.skip("counted in pg_stat_activity")
    owner = ASGI_APP_NAME if kind == "asgi" else None
    ids = [submit(apis, f"conn-{n}") for n in range(12)]
    before = _database_sessions(owner)

    waiters = [Waiter(apis["agent"], workflow_id, timeout=30) for workflow_id in ids]
    for waiter in waiters:
        waiter.start()
    if kind == "wsgi":
        # The live server runs in this process: count once every waiter is
        # parked with the watcher and has let its connection go, not while
        # some are still signing in (each holds a connection for that moment,
        # longer on a busy host). A waiter that kept its connection would
        # keep the count up until the deadline.
        deadline = time.monotonic() + 15
        while waiting.watcher.waiting() < len(waiters) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert waiting.watcher.waiting() == len(waiters), "the waiters never all parked"
        during, settled_by = _database_sessions(owner), time.monotonic() + 10  # well before the waits end
        while during > before + 1 and time.monotonic() < settled_by:
            time.sleep(0.1)
            during = _database_sessions(owner)
    else:
        time.sleep(2.0)
        during = []
        for _ in range(5):
            during.append(_database_sessions(owner))
            time.sleep(0.1)
        during = max(during)
    for workflow_id in ids:
        approve(apis, workflow_id)
    answers = [waiter.answer() for waiter in waiters]

    assert all(answer["decision"] == "approved" for answer in answers)  # they were waiting when counted
    if kind == "asgi":
        # The pool may have grown to its size while the waiters' requests
        # came in at once; beside it, only the watcher's LISTEN.
        assert during <= POOL_MAX + 1, (kind, before, during)
    else:
        # At most one more session than before the waiters came: the watcher's LISTEN.
        assert during <= before + 1, (kind, before, during)


def _listen_sessions(application_name: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query = %s",
            [application_name, f"LISTEN {announcements.CHANNEL}"],
        )
        return [pid for (pid,) in cursor.fetchall()]


def test_a_decision_made_while_the_listen_connection_is_down_still_reaches_its_waiter(asgi_server, people):
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN is PostgreSQL's")
    apis = {name: HttpApi(asgi_server.url, user) for name, user in people.items()}
    workflow_id = submit(apis, "cut-1")
    waiter = Waiter(apis["agent"], workflow_id, timeout=30)
    waiter.start()
    deadline = time.monotonic() + 10
    while not (listening := _listen_sessions(ASGI_APP_NAME)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (session,) = listening

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [session])
        assert cursor.fetchone()[0] is True
    _, approved_at = approve(apis, workflow_id)  # announced to nobody: the watcher is reconnecting
    answer = waiter.answer()

    assert answer["decision"] == "approved" and waiter.answered_at - approved_at < 2.0
    assert waiter.answered_at - waiter.started_at < 10  # not at the wait's timeout
    assert [pid for pid in _listen_sessions(ASGI_APP_NAME) if pid != session]  # listening again, anew


def test_waiters_under_the_asgi_front_hold_no_thread(asgi_server, people):
    apis = {name: HttpApi(asgi_server.url, user) for name, user in people.items()}
    (worker,) = asgi_server.worker_pids()
    ids = [submit(apis, f"thread-{n}") for n in range(20)]
    before = len(os.listdir(f"/proc/{worker}/task"))

    waiters = [Waiter(apis["agent"], workflow_id, timeout=30) for workflow_id in ids]
    for waiter in waiters:
        waiter.start()
    time.sleep(2.0)
    during = len(os.listdir(f"/proc/{worker}/task"))
    for workflow_id in ids:
        approve(apis, workflow_id)
    answers = [waiter.answer() for waiter in waiters]

    assert all(answer["decision"] == "approved" for answer in answers)
    # Its Django threads (started as requests came) and the watcher, not one per waiter.
    assert during <= before + WEB_THREADS + 1 < before + len(ids), (before, during)


def test_without_listen_a_web_process_reads_the_statuses_its_waiters_watch(api, settings):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite always reads: the tests above wait that way on SQLite")
    settings.Q_LISTEN = False  # behind a pooler in transaction mode: nothing is announced, nobody listens
    workflow = plans.submit(api["agent"].user, noop_plan("unannounced")).workflow

    def approve_later():
        decide.approve(workflow, by=api["reviewer"].user)
        connection.close()  # this thread's

    threading.Timer(1.0, approve_later).start()

    began = time.monotonic()
    response = api["agent"].get(f"/workflows/{workflow.pk}/wait", timeout=20)

    assert response.json()["decision"] == "approved"
    assert 1.0 <= time.monotonic() - began < 2.5


# --- the announcements the waiters hear -------------------------------------------


@pytest.fixture
def listener():
    if connection.vendor != "postgresql":
        pytest.skip("announced by NOTIFY on PostgreSQL; SQLite is read instead")
    listening = psycopg.connect(**connections["default"].get_connection_params(), autocommit=True)
    listening.execute(f"LISTEN {announcements.CHANNEL}")
    yield listening
    listening.close()


def heard(listening, seconds=1.0) -> list[str]:
    return [note.payload for note in listening.notifies(timeout=seconds)]


def test_a_decision_is_announced_at_its_commit_and_never_after_a_rollback(listener, people):
    kept = plans.submit(people["agent"], noop_plan("kept")).workflow
    undone = plans.submit(people["agent"], noop_plan("undone")).workflow

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        decide.approve(undone, by=people["reviewer"])
        raise Undo
    decide.approve(kept, by=people["reviewer"])

    assert heard(listener) == [f"{kept.pk} APPROVED"]
    assert Workflow.objects.get(pk=undone.pk).status == "PLANNED"
