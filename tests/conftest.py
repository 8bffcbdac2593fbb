import json
import os
import secrets
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import requests
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.test import Client

from tests.support import redis_server, seeing
from tests.support.desk import TicketDesk
from tests.support.processes import Worker
from workflows import roles
from workflows.audit import keys
from workflows.models import Workflow
from workflows.operations import tokens

pytest_plugins = ["tests.support.chromium"]

PERSONAS = {
    "reviewer": [roles.REVIEWERS],
    "reviewer2": [roles.REVIEWERS],
    "operator": [roles.OPERATORS],
    "auditor": [roles.AUDITORS],
    "agent": [],
    "admin": [roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS],
}
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True, scope="session")
def audit_key():
    """One audit key for the run, shared with the workers it starts (they
    inherit the environment): the test runner turns DEBUG off, so the
    development key is not used, and approvals sealed here must verify there."""
    os.environ.setdefault("AUDIT_KEYS", f"test:{secrets.token_urlsafe(32)}")
    django_settings.AUDIT_KEYS = os.environ["AUDIT_KEYS"]
    keys.audit_keys.cache_clear()


@pytest.fixture(autouse=True, scope="session")
def webhook_settings():
    """A webhook key for the run, shared with the workers it starts, and
    private addresses allowed: the desk and the test receivers listen on
    127.0.0.1 (the tests of the address rules turn it off)."""
    from cryptography.fernet import Fernet

    from workflows.webhooks import cipher

    os.environ.setdefault("WEBHOOK_SECRET_KEYS", Fernet.generate_key().decode())
    os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE", "1")
    django_settings.WEBHOOK_SECRET_KEYS = [os.environ["WEBHOOK_SECRET_KEYS"]]
    django_settings.WEBHOOK_ALLOW_PRIVATE = os.environ["WEBHOOK_ALLOW_PRIVATE"] == "1"
    cipher.cipher.cache_clear()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def client():
    """The console's client: its decisions carry what the page showed (`seeing`)."""
    return seeing.Client()


@pytest.fixture
def people(db):
    """The personas of the product, each in the groups of its role."""
    users = {}
    for name, groups in PERSONAS.items():
        user = User.objects.create_user(name, password=PASSWORD, is_staff=name == "admin")
        # get_or_create: transactional tests flush the groups the migration made.
        user.groups.add(*(Group.objects.get_or_create(name=group)[0] for group in groups))
        users[name] = user
    return users


class ApiClient:
    """Calls the JSON API in-process as one persona, with a real bearer token."""

    def __init__(self, user):
        self.user = user
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(user)}")

    def get(self, path, **params):
        return self.client.get(f"/api/v1{path}", params)

    def post(self, path, body=None):
        body = seeing.json_body(path, body if body is not None else {})
        return self.client.post(f"/api/v1{path}", body, content_type="application/json")

    def patch(self, path, body=None):
        return self.client.patch(f"/api/v1{path}", body if body is not None else {}, content_type="application/json")


@pytest.fixture
def api(people):
    return {name: ApiClient(user) for name, user in people.items()}


class HttpApi:
    """Calls the JSON API over real HTTP as one persona."""

    def __init__(self, base_url, user):
        self.base = f"{base_url}/api/v1"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {tokens.issue(user)}"

    def get(self, path, **params):
        return self.session.get(f"{self.base}{path}", params=params, timeout=10)

    def post(self, path, body=None):
        body = seeing.json_body(path, body if body is not None else {})
        return self.session.post(f"{self.base}{path}", json=body, timeout=10)


@pytest.fixture
def http_api(live_server, people):
    return {name: HttpApi(live_server.url, user) for name, user in people.items()}


@pytest.fixture(scope="session")
def desk_process(tmp_path_factory):
    with TicketDesk(tmp_path_factory.mktemp("desk") / "desk.sqlite3") as desk:
        yield desk


@pytest.fixture
def desk(desk_process, settings):
    """The real ticket desk process, wiped for each test, with the project pointed at it.
    A request an earlier test's worker sent may still sit in the desk's
    latency fault: it must land before the wipe, not in this test's ledger."""
    return fresh_desk(desk_process, settings)


def console_jwks_file(path) -> Path:
    """The console's published key set (`/.well-known/jwks.json`), written
    to a file a desk can be given: the workers the tests start sign with
    the same key set (DEBUG's, in VAR_DIR)."""
    from workflows.audit import signing

    path = Path(path)
    path.write_text(json.dumps(signing.jwks()))
    return path


@pytest.fixture(scope="session")
def proof_desk_process(tmp_path_factory):
    """A desk that requires an approval proof on every write (DESIGN §25),
    trusting the console's key set."""
    folder = tmp_path_factory.mktemp("proof-desk")
    with TicketDesk(folder / "desk.sqlite3", require_proofs=console_jwks_file(folder / "jwks.json")) as desk:
        yield desk


@pytest.fixture
def proof_desk(proof_desk_process, settings):
    """`desk`, requiring approval proofs."""
    return fresh_desk(proof_desk_process, settings)


def fresh_desk(desk_process, settings):
    desk_process.clear_faults()
    deadline = time.monotonic() + 60
    while any(desk_process.concurrency()["in_flight"].values()):
        assert time.monotonic() < deadline, "the desk still holds an earlier test's requests"
        time.sleep(0.05)
    desk_process.reset()
    settings.TICKET_DESK_URL = desk_process.url
    return desk_process


@pytest.fixture
def rediscover(settings):
    """Discover the actions again in this process, as start-up does, under
    the settings the test sets; what start-up installed is put back after."""
    from workflows.actions import plugins, registry

    previous = registry.current()
    yield plugins.discover
    registry.install(previous)


def manage(*args: str, cwd=None, python=(sys.executable,), **env: str) -> subprocess.CompletedProcess:
    """`python manage.py ARGS` in a process of its own, as an operator runs it."""
    return subprocess.run(
        [*python, "manage.py", *args],
        cwd=cwd or django_settings.BASE_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A Redis that answers: REDIS_URL (default 127.0.0.1:6379, where .ci/run
    finds or starts one), else a redis-server of this session's own on a
    free port. Without either, the test is skipped loudly; under CI=true it
    fails instead, because CI must run it."""
    url = redis_server.configured_url()
    if redis_server.ping(url):
        yield url
    elif redis_server.installed():
        with redis_server.Server(tmp_path_factory.mktemp("redis")) as server:
            yield server.url
    else:
        reason = (
            f"Redis does not answer at {url} and redis-server is not installed: the Redis broker was NOT "
            "tested (apt-get install redis-server, or run .ci/run)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        warnings.warn(reason, pytest.PytestWarning)
        pytest.skip(f"!! {reason}")


@pytest.fixture
def start_worker(transactional_db, desk, tmp_path):
    """Start real `qcluster` processes against the test database and the desk."""
    started = []

    def start(name="worker", **env):
        worker = Worker(tmp_path, name=name, env={"TICKET_DESK_URL": desk.url, **env})
        started.append(worker)
        return worker.start()

    yield start
    for worker in started:
        worker.stop()


def wait_for_status(workflow_id, statuses, timeout=30.0):
    """Poll the database until the workflow reaches one of `statuses`."""
    if isinstance(statuses, str):
        statuses = {statuses}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True).first()
        if status in statuses:
            return status
        time.sleep(0.1)
    raise AssertionError(f"workflow {workflow_id} stayed {status}, expected one of {sorted(statuses)}")


def run_until(workflow_id, statuses, timeout=30.0):
    """Drive the engine in-process (as a worker's loop and tasks would) until
    the workflow reaches one of `statuses`."""
    from workflows.engine import execution, recovery

    if isinstance(statuses, str):
        statuses = {statuses}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recovery.recover_expired_leases()
        execution.drain(budget_seconds=1)
        status = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True).first()
        if status in statuses:
            return status
        time.sleep(0.05)
    raise AssertionError(f"workflow {workflow_id} stayed {status}, expected one of {sorted(statuses)}")


def ticket_plan(key="plan-1", **extra):
    """The three-step plan of the main use case: later steps use $from."""
    return {
        "name": "Open, comment on and close a ticket",
        "submission_key": key,
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire", "body": "Floor 3"}},
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.id"}, "body": "Extinguisher on its way"},
            },
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
        ],
        **extra,
    }


def run_job(job_id, limit=1000):
    """Advance a bulk job in-process, batch after batch, as worker tasks
    would (`workflows.tasks.advance_job`), until it is no longer RUNNING."""
    from workflows.models import Job
    from workflows.operations import bulk

    for _ in range(limit):
        job = Job.objects.get(pk=job_id)
        if job.status != Job.Status.RUNNING:
            return job
        bulk.advance(job.pk, job.batch)
    raise AssertionError(f"job {job_id} did not finish in {limit} batches")


@pytest.fixture
def spans():
    """Spans of this process (the live server's requests among them),
    collected in memory; nothing of tracing is left installed after."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from durableconsole import telemetry

    exporter = InMemorySpanExporter()
    telemetry.install(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        telemetry.uninstall()


@pytest.fixture
def admin_api(people):
    """The API in-process as the admin, who holds every role."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(people['admin'])}")


@pytest.fixture
def admin_console(people):
    """The console as the admin, with CSRF checks on as in production."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["admin"])
    client.get("/login/")  # sets the CSRF cookie, as the first page a browser loads would
    client.csrf_token = client.cookies["csrftoken"].value
    return client
