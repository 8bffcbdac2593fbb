import os
import secrets
import warnings

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.test import Client

from tests.support import flushing, redis_server, seeing
from tests.support.api import ApiClient, HttpApi
from tests.support.desk import TicketDesk, console_jwks_file, fresh_desk
from tests.support.personas import PASSWORD, PERSONAS
from tests.support.processes import Worker
from workflows.audit import keys
from workflows.operations import tokens

pytest_plugins = ["tests.support.chromium"]


def pytest_configure(config):
    flushing.install()


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


@pytest.fixture
def api(people):
    return {name: ApiClient(user) for name, user in people.items()}


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


@pytest.fixture(scope="session")
def proof_desk_process(tmp_path_factory):
    """A desk that requires an approval proof on every write (docs/explanation/approval-proofs.md#approval-proof),
    trusting the console's key set."""
    folder = tmp_path_factory.mktemp("proof-desk")
    with TicketDesk(folder / "desk.sqlite3", require_proofs=console_jwks_file(folder / "jwks.json")) as desk:
        yield desk


@pytest.fixture
def proof_desk(proof_desk_process, settings):
    """`desk`, requiring approval proofs."""
    return fresh_desk(proof_desk_process, settings)


@pytest.fixture
def rediscover(settings):
    """Discover the actions again in this process, as start-up does, under
    the settings the test sets; what start-up installed is put back after."""
    from workflows.actions import plugins, registry

    previous = registry.current()
    yield plugins.discover
    registry.install(previous)


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


@pytest.fixture
def spans():
    """Spans of this process (the live server's requests among them),
    collected in memory; nothing of tracing is left installed after."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from workflows import telemetry

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
