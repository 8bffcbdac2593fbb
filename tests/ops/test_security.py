"""Hardening: production settings, headers, CSRF, throttling, sizes, tokens."""

import json
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.processes import PROJECT_DIR
from tests.support.seeing import Client
from workflows import env
from workflows.models import Workflow


def manage(*args, **env):
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "AUDIT_KEYS", "SIGNING_KEYS_FILE")
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_deploy_check_is_clean_with_production_settings():
    import secrets

    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="console.example.com",
        VAR_DIR=str(PROJECT_DIR / "var"),
        AUDIT_KEYS=f"k1:{secrets.token_urlsafe(32)}",
        SIGNING_KEYS_FILE="/nonexistent/signing-keys.json",
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("missing", ["AUDIT_KEYS", "SIGNING_KEYS_FILE"])
def test_audit_and_signing_keys_are_required_when_debug_is_off(missing):
    import secrets

    env = {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "console.example.com",
        "AUDIT_KEYS": f"k1:{secrets.token_urlsafe(32)}",
        "SIGNING_KEYS_FILE": "/nonexistent/signing-keys.json",
    }
    del env[missing]
    for command in (["check"], ["qcluster", "--run-once"]):
        result = manage(*command, **env)
        assert result.returncode != 0 and f"{missing} must be set when DEBUG is off" in result.stderr, command


def test_secret_key_is_required_when_debug_is_off():
    result = manage("check", DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_a_bad_setting_fails_loudly_naming_the_variable():
    result = manage("check", DEBUG="1", Q_WORKERS="many")
    assert result.returncode != 0 and "Q_WORKERS must be an integer" in result.stderr


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "1e999", "1_000", "１２", "0x10", "6O", "1 2"])
def test_a_number_python_would_read_but_a_person_would_not_write_is_refused(monkeypatch, raw):
    """Never a silently different value: NaN would pass every bound check."""
    monkeypatch.setattr(env, "CATALOG", dict(env.CATALOG))  # not a setting of the project
    monkeypatch.setenv("DURABLE_TEST_NUMBER", raw)
    with pytest.raises(ImproperlyConfigured, match="DURABLE_TEST_NUMBER must be a number"):
        env.env_float("DURABLE_TEST_NUMBER", 1.0, minimum=0.0)
    with pytest.raises(ImproperlyConfigured, match="DURABLE_TEST_NUMBER must be an integer"):
        env.env_int("DURABLE_TEST_NUMBER", 1, minimum=0)


def test_a_huge_number_is_refused_with_its_name_and_a_short_excerpt(monkeypatch):
    """5,000 digits: int() would raise its own error, naming no variable, and
    the message would carry the whole value."""
    monkeypatch.setattr(env, "CATALOG", dict(env.CATALOG))
    monkeypatch.setenv("DURABLE_TEST_NUMBER", "9" * 5000)
    with pytest.raises(ImproperlyConfigured) as refused:
        env.env_int("DURABLE_TEST_NUMBER", 1)
    assert str(refused.value) == (
        f"DURABLE_TEST_NUMBER must be an integer of at most 18 digits; got {'9' * 40!r}… (5,000 characters)"
    )
    with pytest.raises(ImproperlyConfigured, match=r"must be a number; got '9{40}'… \(5,000 characters\)$"):
        env.env_float("DURABLE_TEST_NUMBER", 1.0)
    monkeypatch.setenv("DURABLE_TEST_NUMBER", "9" * 19)
    with pytest.raises(ImproperlyConfigured, match="at most 18 digits"):
        env.env_int("DURABLE_TEST_NUMBER", 1)
    monkeypatch.setenv("DURABLE_TEST_NUMBER", "-" + "9" * 18)
    assert env.env_int("DURABLE_TEST_NUMBER", 1) == -(10**18 - 1)


@pytest.mark.parametrize("raw, number, integer", [(" 60 ", 60.0, 60), ("-3", -3.0, -3), ("+2", 2.0, 2)])
def test_numbers_as_written_in_a_shell_are_read(monkeypatch, raw, number, integer):
    monkeypatch.setattr(env, "CATALOG", dict(env.CATALOG))
    monkeypatch.setenv("DURABLE_TEST_NUMBER", raw)
    assert env.env_float("DURABLE_TEST_NUMBER", 1.0) == number and env.env_int("DURABLE_TEST_NUMBER", 1) == integer
    for raw, value in [("0.25", 0.25), (".5", 0.5), ("1e3", 1000.0), ("2.", 2.0)]:
        monkeypatch.setenv("DURABLE_TEST_NUMBER", raw)
        assert env.env_float("DURABLE_TEST_NUMBER", 1.0) == value


def test_security_headers_and_a_strict_csp(client, db):
    response = client.get("/login/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert b"<script>" not in response.content  # no inline scripts at all
    assert b'name="htmx-config"' in response.content


def test_console_posts_need_the_csrf_token(people):
    from workflows.operations import plans

    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    strict = Client(enforce_csrf_checks=True)
    assert strict.login(username="reviewer", password=PASSWORD)
    for path in (f"/workflows/{workflow.pk}/approve", f"/workflows/{workflow.pk}/reject", "/logout/"):
        assert strict.post(path, {"comment": "x"}).status_code == 403, path
    workflow.refresh_from_db()
    assert workflow.status == "PLANNED"


def test_logins_are_throttled(people, client):
    for _ in range(4):
        response = client.post("/login/", {"username": "reviewer", "password": "wrong"})
        assert response.status_code == 200
    assert client.post("/login/", {"username": "reviewer", "password": "wrong"}).status_code == 429  # the 5th
    locked = client.post("/login/", {"username": "reviewer", "password": PASSWORD})
    assert locked.status_code == 429
    assert b"Too many failed logins" in locked.content
    assert "_auth_user_id" not in client.session
    other = Client().post("/login/", {"username": "reviewer2", "password": PASSWORD})
    assert other.status_code == 302  # only that username from that address is locked


def test_revoked_tokens_stop_working(people, capsys):
    call_command("issue_token", "agent")
    token = capsys.readouterr().out.strip()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/workflows").status_code == 200
    call_command("revoke_token", "agent")
    assert client.get("/api/v1/workflows").status_code == 401


def test_sessions_expire(people, client, settings):
    assert settings.SESSION_COOKIE_AGE <= 24 * 3600
    assert client.login(username="reviewer", password=PASSWORD)
    session = client.session
    session.set_expiry(-1)
    session.save()
    assert client.get("/").status_code == 302


@pytest.mark.parametrize("path", ["/api/v1/workflows", "/login/"])
def test_bodies_over_the_limit_get_413(api, settings, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    big = ticket_plan()
    big["context"] = {"blob": "x" * 5000}
    response = api["agent"].client.post(path, json.dumps(big), content_type="application/json")
    assert response.status_code == 413
    assert Workflow.objects.count() == 0


def test_the_default_body_limit_is_one_mebibyte(settings):
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 1024 * 1024


def test_deeply_nested_json_is_refused_and_stores_nothing(api):
    plan = ticket_plan()
    body = json.dumps(plan)[:-1] + ', "context": {"deep": ' + "[" * 5000 + "]" * 5000 + "}}"
    response = api["agent"].client.post("/api/v1/workflows", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert Workflow.objects.count() == 0


def test_moderate_nesting_is_fine(api):
    plan = ticket_plan()
    plan["context"] = {"a": {"b": {"c": [[{"d": 1}]]}}}
    assert api["agent"].post("/workflows", plan).status_code == 201


# --- /metrics: a token, or direct loopback callers only (docs/explanation/decisions.md#bound-decisions) ---------------


def test_metrics_without_a_token_answer_a_direct_loopback_caller_only(live_server, settings):
    import requests

    settings.METRICS_TOKEN = ""
    url = f"{live_server.url}/metrics"
    assert requests.get(url, timeout=10).status_code == 200  # a real connection from 127.0.0.1
    for header in (
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "203.0.113.9"},
        {"X-Forwarded-For": "127.0.0.1"},
    ):
        forwarded = requests.get(url, headers=header, timeout=10)
        assert forwarded.status_code == 403 and "durable_workflows" not in forwarded.text, header


@pytest.mark.parametrize(
    ("peer", "status"),
    [("127.0.0.1", 200), ("::1", 200), ("::ffff:127.0.0.1", 200), ("10.0.0.5", 403), ("203.0.113.9", 403), ("", 403)],
)
def test_metrics_without_a_token_judge_the_peer_address(db, settings, peer, status):
    settings.METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR=peer).get("/metrics").status_code == status


def test_metrics_with_a_token_answer_its_bearer_from_anywhere_and_no_one_else(db, settings, monkeypatch):
    import hmac

    from workflows.web.views import probes

    settings.METRICS_TOKEN = "scrape-me"
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(probes.hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    loopback = Client()
    assert loopback.get("/metrics").status_code == 401  # loopback alone is not enough now
    for wrong in ("Bearer scrape-mf", "Bearer scrape-me2", "bearer scrape-me", "scrape-me", "Basic c2NyYXBlLW1l"):
        refused = loopback.get("/metrics", HTTP_AUTHORIZATION=wrong)
        assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer"), wrong
    remote = Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="198.51.100.1")
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200
    assert (b"Bearer scrape-mf", b"Bearer scrape-me") in compared  # constant-time comparison
