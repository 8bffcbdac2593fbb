"""Secrets never reach a row, a log line, a page or an API answer: a secret
is passed by reference and resolved only by the worker, for the actions and
hosts the policy lists (docs/explanation/trust-core.md#secrets-by-reference).
tests/audit/test_credentials_refused.py pins that a credential is refused and
what people and agents submit is never rewritten."""

import json
import logging

import pytest
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.api import HttpApi
from tests.support.database import every_row_as_text
from tests.support.otlp_collector import Collector
from tests.support.personas import PASSWORD
from tests.support.running import run_until, wait_for_status
from tests.support.secret_policy import desk_policy
from tests.support.seeing import Client
from workflows.audit import redaction, secrets
from workflows.models import Attempt, DeadLetter, Step, Trace, Workflow
from workflows.operations import compensation, plans

pytestmark = pytest.mark.usefixtures("fresh_secret_registry")

DESK_TOKEN = "desk-7Qp2-Zx9w-Lm4k-Rt8v"
SECRET_TICKET = {"key": "open", "action": "ticket.create", "args": {"title": "t", "body": {"$secret": "DESK_TOKEN"}}}


def test_the_row_scan_reads_every_table_and_what_is_stored_encoded(people):
    """A value kept only in a session, a queued task's signed package, or a
    finished task's pickled arguments is still found."""
    from django.contrib.sessions.backends.db import SessionStore
    from django_q.models import OrmQ, Task
    from django_q.signing import SignedPackage

    assert DESK_TOKEN not in every_row_as_text()
    session = SessionStore()
    session["note"] = f"{DESK_TOKEN}-session"
    session.save()
    OrmQ.objects.create(key="scan", payload=SignedPackage.dumps({"id": "q", "args": (f"{DESK_TOKEN}-queued",)}))
    Task.objects.create(
        id="t" * 32,
        name="scan",
        func="noop",
        args=(f"{DESK_TOKEN}-task",),
        started=timezone.now(),
        stopped=timezone.now(),
    )

    rows = every_row_as_text()
    assert all(f"{DESK_TOKEN}-{where}" in rows for where in ("session", "queued", "task"))


# --- (b) secrets by reference, resolved only by the worker --------------------------


def test_planted_secret_reaches_only_the_desk(people, live_server, start_worker, desk, settings, caplog, spans):
    caplog.set_level(logging.DEBUG)
    policy = desk_policy(desk, "ticket.create", "ticket.comment", "noop")
    settings.SECRETS_POLICY = policy
    collector = Collector().__enter__()
    # The worker exports its spans to a real OTLP collector and logs JSON lines.
    worker = start_worker(
        LOG_LEVEL="DEBUG",
        Q_LOG_LEVEL="DEBUG",
        SECRET_DESK_TOKEN=DESK_TOKEN,
        SECRETS_POLICY=json.dumps(policy),
        LOG_FORMAT="json",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    agent, reviewer, operator, auditor = (
        HttpApi(live_server.url, people[n]) for n in ("agent", "reviewer", "operator", "auditor")
    )
    plan = {
        "name": "rotate",
        "submission_key": "planted",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Rotate", "body": {"$secret": "DESK_TOKEN"}}},
            {"key": "echo", "action": "noop", "args": {"echo": {"$secret": "DESK_TOKEN"}, "kept": "plain"}},
            # The desk answers 404 "no ticket <id>": a remote error that echoes what it was sent.
            {"key": "note", "action": "ticket.comment", "args": {"ticket_id": {"$secret": "DESK_TOKEN"}, "body": "x"}},
        ],
    }
    submitted = agent.post("/workflows", plan)
    assert submitted.status_code == 201, submitted.text
    workflow_id = submitted.json()["id"]
    browser = Client()
    assert browser.login(username="reviewer", password=PASSWORD)
    inbox = browser.get("/").content.decode()
    assert "secret:DESK_TOKEN" in inbox
    assert reviewer.post(f"/workflows/{workflow_id}/approve", {"comment": "ok"}).status_code == 200
    wait_for_status(workflow_id, "FAILED")

    assert [t["body"] for t in desk.tickets()] == [DESK_TOKEN]  # the receiver got the value: it was resolved
    steps = {s.key: s for s in Step.objects.filter(workflow_id=workflow_id)}
    assert steps["open"].args == plan["steps"][0]["args"]  # stored as submitted: the reference
    assert steps["echo"].result == {"echo": "[REDACTED secret:DESK_TOKEN]", "kept": "plain"}
    entry = DeadLetter.objects.get(workflow_id=workflow_id)
    assert (entry.step_key, entry.failure_class) == ("note", "INVALID_ARGUMENTS")
    error = Trace.objects.get(pk=entry.trace_id).error
    assert "no ticket [REDACTED secret:DESK_TOKEN]" in error  # the echo happened, and was scrubbed

    answers = {"submitted": submitted.text, "inbox": inbox}
    assert browser.login(username="admin", password=PASSWORD)
    # The undo of `echo` is a noop that echoes the secret again, in its own lane.
    answers["request page"] = browser.get(f"/workflows/{workflow_id}/compensate").content.decode()
    assert "secret:DESK_TOKEN" in answers["request page"]
    requested = operator.post(f"/workflows/{workflow_id}/compensations", {"reason": "rotated twice"})
    assert requested.status_code == 201, requested.text
    comp_id = requested.json()["id"]
    authorized = HttpApi(live_server.url, people["reviewer2"]).post(f"/compensations/{comp_id}/authorize")
    assert authorized.status_code == 200, authorized.text
    wait_for_status(workflow_id, "COMPENSATED")
    undo = Step.objects.get(workflow_id=workflow_id, compensates__key="echo")
    assert undo.result == {"echo": "[REDACTED secret:DESK_TOKEN]", "kept": "plain"}
    assert [t["status"] for t in desk.tickets()] == ["closed"]

    answers.update({"requested": requested.text, "authorized": authorized.text})
    answers.update({path: agent.get(path).text for path in (f"/workflows/{workflow_id}", "/workflows")})
    answers.update(
        {
            path: operator.get(path).text
            for path in (
                f"/dead-letters/{entry.pk}",
                f"/dead-letters/{entry.pk}/preview",
                "/dead-letters",
                f"/compensations/{comp_id}",
            )
        }
    )
    answers["audit"] = auditor.get("/audit", workflow=workflow_id).text
    assert "secret:DESK_TOKEN" in answers[f"/dead-letters/{entry.pk}/preview"]  # the preview shows the reference
    for path in (
        f"/workflows/{workflow_id}/",
        "/workflows/",
        f"/dead-letters/{entry.pk}/",
        "/dead-letters/",
        "/compensations/",
        f"/compensations/{comp_id}/",
        "/attention/",
        "/dashboard/",
        "/audit/",
        f"/audit/?workflow={workflow_id}",
        "/audit/export.jsonl",
        "/audit/export.csv",
    ):
        page = browser.get(path)
        assert page.status_code == 200, path
        answers[path] = b"".join(page.streaming_content).decode() if page.streaming else page.content.decode()
    assert "secret:DESK_TOKEN" in answers[f"/workflows/{workflow_id}/"]  # the workflow page shows the reference
    assert "secret:DESK_TOKEN" in answers[f"/compensations/{comp_id}/"]
    assert [name for name, answer in answers.items() if DESK_TOKEN in answer] == []

    # The worker's spans: the failed call to /tickets/<the secret>/comments
    # among them, its URL redacted where it was made.
    collector.wait_for(
        lambda found: any(
            s["name"] == "durable.record" and s["attributes"].get("durable.step_key") == "note" for s in found
        )
    )
    worker.stop()
    collector.__exit__()
    exported = "\n".join(collector.exports)
    assert "[REDACTED secret:DESK_TOKEN]" in exported
    assert DESK_TOKEN not in exported
    web = "\n".join(span.to_json() for span in spans.get_finished_spans())
    assert "approve" in web  # the scan sees the web requests
    assert DESK_TOKEN not in web
    rows = every_row_as_text()
    assert "[REDACTED secret:DESK_TOKEN]" in rows  # the scan sees the rows the worker wrote
    assert DESK_TOKEN not in rows
    assert DESK_TOKEN not in worker.log()
    lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    assert any(line.get("step_key") == "note" and line.get("trace_id") for line in lines)  # JSON lines, with fields
    assert DESK_TOKEN not in caplog.text


def test_a_from_reference_to_a_redacted_value_blocks_the_step(people, desk, settings, monkeypatch):
    settings.SECRETS_POLICY = desk_policy(desk, "noop")
    monkeypatch.setenv("SECRET_DESK_TOKEN", DESK_TOKEN)
    workflow = plans.submit(
        people["agent"],
        {
            "name": "n",
            "submission_key": "k",
            "steps": [
                {"key": "echo", "action": "noop", "args": {"echo": {"$secret": "DESK_TOKEN"}}},
                {
                    "key": "open",
                    "action": "ticket.create",
                    "args": {"title": "t", "body": {"$from": "echo.result.echo"}},
                },
            ],
        },
    ).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "FAILED")
    echo, open_ = workflow.steps.order_by("position")
    assert echo.result == {"echo": "[REDACTED secret:DESK_TOKEN]"}
    assert (open_.status, open_.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert not open_.attempts.exists()  # blocked before any attempt
    assert desk.tickets() == []  # "[REDACTED]" was never sent


def test_a_compensation_taking_a_redacted_value_is_refused(people, desk, settings, monkeypatch):
    settings.SECRETS_POLICY = desk_policy(desk, "noop")
    monkeypatch.setenv("SECRET_DESK_TOKEN", DESK_TOKEN)
    workflow = plans.submit(
        people["agent"],
        {
            "name": "n",
            "submission_key": "k",
            "steps": [
                {
                    "key": "echo",
                    "action": "noop",
                    "args": {"echo": {"$secret": "DESK_TOKEN"}},
                    "compensation": {"action": "noop", "args": {"undo": {"$from": "echo.result.echo"}}},
                }
            ],
        },
    ).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "COMPLETE")
    with pytest.raises(compensation.CompensationInvalid, match="redacted"):
        compensation.request(workflow, by=people["operator"], reason="undo it")
    assert not workflow.compensations.exists()


def test_a_missing_secret_fails_the_step_naming_the_secret(people, desk, settings, monkeypatch):
    settings.SECRETS_POLICY = desk_policy(desk, "ticket.create")
    monkeypatch.delenv("SECRET_DESK_TOKEN", raising=False)
    workflow = plans.submit(people["agent"], {"name": "n", "submission_key": "k", "steps": [SECRET_TICKET]}).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "FAILED")
    attempt = Attempt.objects.get(step__workflow=workflow)
    assert attempt.failure_class == "PERMISSION_DENIED"
    assert "secret DESK_TOKEN has no value" in attempt.error and "SECRET_DESK_TOKEN" in attempt.error
    assert DeadLetter.objects.filter(workflow=workflow).exists()
    assert desk.tickets() == []


def test_the_worker_reads_a_secret_from_secrets_dir(people, desk, settings, tmp_path, monkeypatch):
    monkeypatch.delenv("SECRET_DESK_TOKEN", raising=False)
    (tmp_path / "DESK_TOKEN").write_text(DESK_TOKEN + "\n")
    settings.SECRETS_DIR = str(tmp_path)
    settings.SECRETS_POLICY = desk_policy(desk, "ticket.create")
    workflow = plans.submit(people["agent"], {"name": "n", "submission_key": "k", "steps": [SECRET_TICKET]}).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "COMPLETE")
    assert [t["body"] for t in desk.tickets()] == [DESK_TOKEN]


def test_a_policy_narrowed_after_approval_blocks_the_step(people, desk, settings, monkeypatch):
    settings.SECRETS_POLICY = desk_policy(desk, "ticket.create")
    monkeypatch.setenv("SECRET_DESK_TOKEN", DESK_TOKEN)
    workflow = plans.submit(people["agent"], {"name": "n", "submission_key": "k", "steps": [SECRET_TICKET]}).workflow
    decide.approve(workflow, by=people["reviewer"])
    settings.SECRETS_POLICY = {}
    run_until(workflow.pk, "FAILED")
    step = workflow.steps.get()
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert desk.tickets() == []


# --- (d) policy refusals: one message, no oracle ----------------------------------


def test_policy_refusals_give_one_message_for_every_reason(api, desk, settings):
    settings.SECRETS_POLICY = {
        **desk_policy(desk, "ticket.create"),
        "HOOK": {"actions": ["http.post"], "hosts": ["hooks.example.com"]},
    }
    ref = {"$secret": "DESK_TOKEN"}
    hook = {"$secret": "HOOK"}
    cases = {
        "unknown name": ("body", {"action": "ticket.create", "args": {"title": "t", "body": {"$secret": "NOPE"}}}),
        "wrong action": ("x", {"action": "noop", "args": {"x": ref}}),
        "wrong host": (
            "json.t",
            {"action": "http.post", "args": {"url": "https://evil.example.com/x", "json": {"t": hook}}},
        ),
        # The host of a URL taken from a result is not known at submission.
        "$from URL": (
            "json.t",
            {"action": "http.post", "args": {"url": {"$from": "first.result.url"}, "json": {"t": hook}}},
        ),
    }
    for why, (field, step) in cases.items():
        steps = [{"key": "first", "action": "noop", "args": {}}, {"key": "second", **step}]
        answer = api["agent"].post("/workflows", {"name": "n", "submission_key": why, "steps": steps})
        assert answer.status_code == 400, why
        assert answer.json()["error"]["fields"][f"steps.1.args.{field}"] == secrets.NOT_ALLOWED, why
    assert not Workflow.objects.exists()
    allowed = api["agent"].post(
        "/workflows",
        {
            "name": "n",
            "submission_key": "ok",
            "steps": [
                {"key": "a", "action": "ticket.create", "args": {"title": "t", "body": ref}},
                {
                    "key": "b",
                    "action": "http.post",
                    "args": {"url": "https://hooks.example.com/in", "json": {"t": hook}},
                },
            ],
        },
    )
    assert allowed.status_code == 201, allowed.json()


def test_a_secret_in_a_message_goes_only_to_the_recipient_domains_the_policy_lists(api, settings):
    """For email.send, SECRETS_POLICY's hosts are the recipients' domains
    (docs/explanation/decisions.md#bound-decisions): every recipient, To and Cc, must be at one of them."""
    settings.SECRETS_POLICY = {"MAIL_TOKEN": {"actions": ["email.send"], "hosts": ["example.com"]}}

    def submit(key, **recipients):
        return api["agent"].post(
            "/workflows",
            {
                "name": "n",
                "submission_key": key,
                "steps": [
                    {
                        "key": "mail",
                        "action": "email.send",
                        "args": {"subject": "s", "body": {"$secret": "MAIL_TOKEN"}, **recipients},
                    }
                ],
            },
        )

    for why, recipients in {
        "another domain": {"to": "ops@evil.example"},
        "one copy elsewhere": {"to": "ops@example.com", "cc": ["a@example.com", "b@evil.example"]},
        "a subdomain": {"to": "ops@mail.example.com"},
        "a look-alike": {"to": "ops@example.com.evil.example"},
    }.items():
        answer = submit(why, **recipients)
        assert answer.status_code == 400, why
        assert answer.json()["error"]["fields"] == {"steps.0.args.body": secrets.NOT_ALLOWED}, why
    assert not Workflow.objects.exists()
    allowed = submit("ok", to=["ops@example.com", "Dev@EXAMPLE.com"], cc="audit@example.com")
    assert allowed.status_code == 201, allowed.json()


@pytest.mark.parametrize(
    "ref",
    [
        {"$secret": "lower"},
        {"$secret": 5},
        {"$secret": "A", "more": 1},
        {"$secret": "A" * 65},
        {"$secret": "A\n"},
        {"$secret": "../A"},
    ],
)
def test_a_malformed_reference_is_refused(api, ref):
    answer = api["agent"].post(
        "/workflows",
        {"name": "n", "submission_key": "k", "steps": [{"key": "a", "action": "noop", "args": {"x": [ref]}}]},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"] == {"steps.0.args.x.0": secrets.MALFORMED}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"lower": {"actions": []}}', "not a secret name"),
        ('{"A": {"actions": "noop"}}', "A.actions must be a list"),
        ('{"A": {"actions": [], "other": 1}}', "must be {"),
        ("[1]", "neither JSON nor a readable file"),
        ("{not json", "not valid JSON"),
        ("/no/such/policy.json", "neither JSON nor a readable file"),
    ],
)
def test_a_bad_secrets_policy_stops_start_up_naming_the_variable(raw, says):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="SECRETS_POLICY") as caught:
        secrets.parse_policy(raw)
    assert says in str(caught.value)


def test_the_policy_may_be_a_file(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text('{"DESK_TOKEN": {"actions": ["ticket.create"], "hosts": ["Desk.Example.com"]}}')
    assert secrets.parse_policy(str(path)) == {
        "DESK_TOKEN": {"actions": ["ticket.create"], "hosts": ["desk.example.com"]}
    }


# --- remote text and logs are redacted where they enter ------------------------------


def test_log_lines_and_tracebacks_are_scrubbed(monkeypatch):
    monkeypatch.setenv("SECRET_DESK_TOKEN", DESK_TOKEN)
    secrets.value_of("DESK_TOKEN")
    logger = logging.getLogger("workflows.test")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(redaction.RedactingFilter())
    records = []
    handler.emit = lambda record: records.append(handler.format(record))
    logger.addHandler(handler)
    try:
        logger.error("calling with Authorization: Bearer %s", "4f9a8b7c6d5e4f3a2b1c")
        try:
            raise ValueError(f"the desk said no to {DESK_TOKEN}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert len(records) == 2
    assert "4f9a8b7c6d5e4f3a2b1c" not in records[0] and "[REDACTED]" in records[0]
    assert "ValueError" in records[1] and DESK_TOKEN not in records[1]
