"""Bounded connections: a burst of requests against the web process as
production starts it (gunicorn with the ASGI front) never holds more
PostgreSQL connections than its pool (DB_POOL_MAX), and a request that can
get no connection, whether the pool's wait ran out or PostgreSQL refused one
for lack of slots, is answered 503 with Retry-After, never 500
(docs/deploying.md#database-connections).
"""

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import requests
from django.db import connection

from workflows.management.commands.rundemo import demo_commands
from workflows.operations import tokens
from workflows.ops.processes import WebServer, database_url, free_port

pytestmark = pytest.mark.django_db(transaction=True)

WEB_THREADS = 8


@pytest.fixture
def postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("counts sessions in PostgreSQL's pg_stat_activity")


def plan(key: str) -> dict:
    return {"name": f"plan {key}", "submission_key": key, "steps": [{"key": "s", "action": "noop", "args": {}}]}


def sessions(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


def burst(server: WebServer, token: str, count: int, at_once: int | None = None) -> list[requests.Response]:
    """`count` submissions, `at_once` of them (all by default) in flight at
    any moment, each on its own connection to the server."""

    def submit(n: int) -> requests.Response:
        return requests.post(
            f"{server.url}/api/v1/workflows",
            json=plan(f"burst-{n}"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )

    with ThreadPoolExecutor(at_once or count) as pool:
        return list(pool.map(submit, range(count)))


def assert_refused_as_unavailable(response: requests.Response) -> None:
    assert response.status_code == 503, (response.status_code, response.text[:500])
    assert int(response.headers["Retry-After"]) > 0


def assert_api_refusal(response: requests.Response) -> None:
    assert_refused_as_unavailable(response)
    assert response.json()["error"]["code"] == "unavailable"


class Sampler(threading.Thread):
    """Counts the server's sessions in pg_stat_activity until stopped; the most seen."""

    def __init__(self, application_name: str):
        super().__init__(daemon=True)
        self.application_name, self.most, self.stopping = application_name, 0, threading.Event()

    def run(self) -> None:
        with psycopg.connect(database_url(), autocommit=True) as watcher:
            while not self.stopping.is_set():
                (count,) = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = %s",
                    [self.application_name],
                ).fetchone()
                self.most = max(self.most, count)
                time.sleep(0.01)

    def stop(self) -> int:
        self.stopping.set()
        self.join()
        return self.most


@contextlib.contextmanager
def demo_web(name: str, env: dict[str, str]):
    """The web process as `make run` starts it (`manage.py runserver`, a
    thread per request), with the same `url` as a WebServer."""
    server = WebServer(name, Path(), env)
    command = demo_commands(f"127.0.0.1:{server.port}", free_port())["web"]
    process = subprocess.Popen(
        command,
        env={**os.environ, **server.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "runserver did not start"
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)


@pytest.mark.parametrize("serving", ["gunicorn", "runserver"])
def test_a_burst_of_submissions_holds_no_more_connections_than_the_pool(postgresql, people, tmp_path, serving):
    """Six times as many concurrent submissions as the ASGI front has
    threads, and twice as many threads as pooled connections (runserver: a
    thread per request, twice as many requests at once as connections, as
    many as its listen queue takes): nothing but 201 or a 503 with
    Retry-After, and the server's sessions never more than its pool (it has
    no waiters, so no LISTEN connection either)."""
    name, pool_max = f"burst-{uuid.uuid4().hex[:8]}", 4
    env = {"DATABASE_URL": database_url(), "WEB_THREADS": str(WEB_THREADS), "DB_POOL_MAX": str(pool_max)}
    token = tokens.issue(people["agent"])
    started = WebServer(name, tmp_path, env) if serving == "gunicorn" else demo_web(name, env)
    with started as server:
        sampler = Sampler(name)
        sampler.start()
        try:
            responses = burst(server, token, 6 * WEB_THREADS, None if serving == "gunicorn" else 2 * pool_max)
            after = sessions(name)
        finally:
            most = sampler.stop()

    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {201, 503}, statuses
    for response in responses:
        if response.status_code == 503:
            assert_api_refusal(response)
    assert 201 in statuses
    assert 1 <= most <= pool_max, most
    assert after <= pool_max, after


@pytest.fixture
def scarce_role(postgresql):
    """A login role allowed LIMIT connections to the server, with what the
    console needs of the test database: PostgreSQL refuses it a connection
    beyond them exactly as it refuses anyone past max_connections
    (SQLSTATE 53300), without taking slots from anything else on the server."""
    role, password, limit = f"scarce_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, 3
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' CONNECTION LIMIT {limit}")
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
    parts = urlsplit(database_url())
    yield parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}").geturl()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
        cursor.execute(f"DROP OWNED BY {role}")
        cursor.execute(f"DROP ROLE {role}")


def take_every_slot(url: str) -> list[psycopg.Connection]:
    """Connections as the role until PostgreSQL refuses one; the refusal is
    checked to be the one for lack of slots."""
    held = []
    while True:
        try:
            held.append(psycopg.connect(url, connect_timeout=5))
        except psycopg.OperationalError as exc:
            assert "too many connections for role" in str(exc), exc
            return held
        assert len(held) <= 10, "the role's CONNECTION LIMIT is not enforced"


@pytest.mark.parametrize("pool", ["1", "0"], ids=["pooled", "unpooled"])
def test_no_connection_to_be_had_is_503_with_retry_after_never_500(scarce_role, people, tmp_path, pool):
    """Every slot the server may use is taken: pooled, each request waits
    DB_POOL_TIMEOUT while the pool is refused new connections; unpooled
    (DB_POOL=0, a connection per thread), each thread is refused its own.
    Either way every API request and console page is a 503 with
    Retry-After, and once slots are free again a client that retries gets
    through."""
    name = f"scarce-{uuid.uuid4().hex[:8]}"
    env = {
        "DATABASE_URL": scarce_role,
        "WEB_THREADS": str(WEB_THREADS),
        "DB_POOL": pool,
        "DB_POOL_TIMEOUT": "0.5",
    }
    token = tokens.issue(people["agent"])
    with WebServer(name, tmp_path, env) as server:
        # The server's connections go (as a restarted database's would), and
        # the test takes every slot the role has. A pool opens connections
        # again by itself: on a busy host it may take a freed slot before the
        # test does, so the server's sessions go again until it holds none.
        held, deadline = [], time.monotonic() + 30
        while True:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", [name]
                )
            while sessions(name) and time.monotonic() < deadline:
                time.sleep(0.05)
            held += take_every_slot(scarce_role)
            if not sessions(name):
                break
            assert time.monotonic() < deadline, "the server kept a connection through every termination"
        assert held, "no slot was free to take"
        try:
            responses = burst(server, token, 2 * WEB_THREADS)
            page = requests.get(f"{server.url}/login/", timeout=30)
        finally:
            for conn in held:
                conn.close()
        recovered = retry_until_answered(server, token)

    for response in responses:
        assert_api_refusal(response)
    assert_refused_as_unavailable(page)
    assert page.headers["Content-Type"].startswith("text/plain")
    assert recovered.status_code == 201, recovered.text[:500]


def retry_until_answered(server: WebServer, token: str) -> requests.Response:
    """Submit as a client that honours Retry-After does, for up to a minute."""
    deadline = time.monotonic() + 60
    while True:
        response = requests.post(
            f"{server.url}/api/v1/workflows",
            json=plan("after-the-burst"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(int(response.headers["Retry-After"]))
