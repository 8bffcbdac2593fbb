"""The database is configured for durable checkpoints; the demo starts and
stops cleanly; a long effect keeps its lease."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests
from django.db import connection

from tests.support import deciding as decide
from tests.support.desk import free_port
from tests.support.processes import PROJECT_DIR


def test_the_database_is_set_up_for_durable_checkpoints(db, settings):
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert cursor.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        options = settings.DATABASES["default"]["OPTIONS"]
        assert options["transaction_mode"] == "IMMEDIATE" and options["timeout"] >= 5
    else:
        assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0  # persistent connections
        assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


@pytest.mark.django_db(transaction=True)
def test_a_long_effect_keeps_its_lease_through_the_heartbeat(people, desk, settings):
    """With a 1 s lease and a 2.5 s effect, only the heartbeat stops recovery
    from handing the step to another worker mid-effect."""
    from tests.support.plans import ticket_plan
    from workflows.engine import execution, recovery
    from workflows.models import Attempt, AuditEvent
    from workflows.operations import plans

    settings.STEP_LEASE_SECONDS = 1.0
    settings.ACTION_TIMEOUT_SECONDS = 5.0
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    decide.approve(workflow, by=people["reviewer"])
    desk.fault(mode="latency", ms=2500)
    step = execution.claim(workflow.pk)
    worker = threading.Thread(target=execution.execute, args=(step,))
    worker.start()
    recovered = 0
    while worker.is_alive():  # another worker's sweep, running all along
        recovered += recovery.recover_expired_leases()
        time.sleep(0.1)
    worker.join()
    desk.clear_faults()
    assert recovered == 0
    assert not AuditEvent.objects.filter(verb="step.lease_expired").exists()
    assert list(Attempt.objects.filter(step=step).values_list("status", flat=True)) == ["SUCCEEDED"]


@pytest.mark.live
def test_the_demo_starts_everything_and_ctrl_c_stops_all_of_it(tmp_path):
    web, desk_port = free_port(), free_port()
    env = {**os.environ, "DEBUG": "1", "VAR_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "rundemo", "--web", f"127.0.0.1:{web}", "--desk-port", str(desk_port)],
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if (
                    requests.get(f"http://127.0.0.1:{web}/login/", timeout=1).status_code == 200
                    and requests.get(f"http://127.0.0.1:{desk_port}/tickets", timeout=1).status_code == 200
                ):
                    break
            except requests.RequestException:
                pass
            assert demo.poll() is None and time.monotonic() < deadline, "the demo did not come up"
            time.sleep(0.3)
        # The demo's desk refuses a write that carries no approval proof.
        refused = requests.post(
            f"http://127.0.0.1:{desk_port}/tickets",
            json={"title": "by hand"},
            headers={"Idempotency-Key": "k"},
            timeout=5,
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "approval_proof_invalid"
        tickets = requests.get(f"http://127.0.0.1:{desk_port}/tickets", timeout=5).json()
        assert "by hand" not in [ticket["title"] for ticket in tickets]
        children = subprocess.run(["pgrep", "-g", str(demo.pid)], capture_output=True, text=True).stdout.split()
        pattern = f"ticketdesk --port {desk_port}|runserver 127.0.0.1:{web}"
        sessions = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True).stdout.split()
        assert sessions, "web and desk run as their own processes"
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C in the terminal
        output, _ = demo.communicate(timeout=40)
    finally:
        if demo.poll() is None:  # a failed assertion above: still stop everything it started
            os.killpg(demo.pid, signal.SIGINT)
            try:
                demo.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
    assert "reviewer, reviewer2, operator, auditor, agent, admin" in output  # the logins are printed
    assert "Stopped web, worker and ticket desk." in output
    deadline = time.monotonic() + 20
    while left := subprocess.run(
        ["pgrep", "-f", "--", f"ticketdesk --port {desk_port}|runserver 127.0.0.1:{web}"],
        capture_output=True,
        text=True,
    ).stdout.split():
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.1)
    alive = [pid for pid in children + sessions if _running(int(pid))]
    assert alive == []


def test_the_demo_desk_requires_proofs_checked_against_the_console_keys():
    from workflows.management.commands.rundemo import demo_commands

    commands = demo_commands("0.0.0.0:8000", 8100)
    assert list(commands) == ["web", "worker", "ticket desk"]  # the desk once the keys are served
    desk = commands["ticket desk"]
    assert desk[desk.index("ticketdesk") :] == [
        "ticketdesk",
        "--port",
        "8100",
        "--require-approval-proof",
        "--jwks",
        "http://127.0.0.1:8000/.well-known/jwks.json",
        "--audience",
        "http://127.0.0.1:8100",
    ]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_test_client_serves_static_files_without_listing_every_one_first(db, monkeypatch):
    """pytest-django turns DEBUG off after the settings are read: whitenoise
    keeps the lookup the settings chose (per request, through the finders),
    instead of listing and stat'ing every app's static files each time a
    handler loads its middleware, as every test client does."""
    from django.test import Client
    from whitenoise.middleware import WhiteNoiseMiddleware

    def listed(self):
        raise AssertionError("the middleware listed every static file as it loaded")

    monkeypatch.setattr(WhiteNoiseMiddleware, "add_files_from_finders", listed)
    found = Client().get("/static/favicon.svg")
    assert found.status_code == 200 and b"<svg" in b"".join(found.streaming_content)
