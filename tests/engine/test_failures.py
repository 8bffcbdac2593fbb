"""Failures are classified; only safe ones are retried, within one deadline;
the rest are dead-lettered. Every test injects a real fault into the real
ticket desk and proves it happened."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.running import run_until
from workflows.engine import policy, retry
from workflows.models import Attempt, DeadLetter, Step
from workflows.operations import plans


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch, settings):
    monkeypatch.setattr(retry, "BASE_SECONDS", 0.05)
    monkeypatch.setattr(retry, "CAP_SECONDS", 0.2)
    settings.ACTION_TIMEOUT_SECONDS = 1.0


def one_ticket(key="one", title="Boiler pressure low", **extra):
    return {
        "name": "one ticket",
        "submission_key": key,
        "steps": [{"key": "open", "action": "ticket.create", "args": {"title": title, "body": "b"}}],
        **extra,
    }


def start(people, body):
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer"])
    return workflow


def attempts_of(workflow):
    return list(
        Attempt.objects.filter(step__workflow=workflow).order_by("number").values_list("status", "failure_class")
    )


def test_transient_errors_recover_within_the_deadline_with_one_ticket(people, desk):
    desk.fault(mode="error", status=503, count=2)
    workflow = start(people, one_ticket())
    assert run_until(workflow.pk, "COMPLETE") == "COMPLETE"
    assert attempts_of(workflow) == [("FAILED", "TRANSIENT"), ("FAILED", "TRANSIENT"), ("SUCCEEDED", "")]
    assert desk.faults() == []  # both injected errors were consumed
    assert len(desk.tickets()) == 1


def test_a_429_waits_at_least_its_retry_after(people, desk):
    desk.fault(mode="rate_limit", retry_after=1, count=1)
    workflow = start(people, one_ticket())
    run_until(workflow.pk, "COMPLETE")
    first, second = Attempt.objects.filter(step__workflow=workflow).order_by("number")
    assert first.failure_class == "RATE_LIMITED"
    assert (second.started_at - first.finished_at).total_seconds() >= 1.0
    assert len(desk.tickets()) == 1


def test_invalid_arguments_dead_letter_after_exactly_one_attempt(people, desk):
    ticket = desk.request("POST", "/tickets", json={"title": "t"}).json()["id"]
    body = {
        "name": "comment on a ticket gone after approval",
        "submission_key": "bad",
        "steps": [{"key": "note", "action": "ticket.comment", "args": {"ticket_id": ticket, "body": "hi"}}],
    }
    workflow = start(people, body)
    desk.fault(mode="error", status=404)  # the ticket is gone by the time the step runs
    assert run_until(workflow.pk, "FAILED") == "FAILED"
    assert attempts_of(workflow) == [("FAILED", "INVALID_ARGUMENTS")]
    step = workflow.steps.get()
    assert (step.status, step.failure_class) == ("DEAD_LETTERED", "INVALID_ARGUMENTS")
    entry = DeadLetter.objects.get(step=step)
    assert (entry.failure_class, entry.attempt_count, entry.status) == ("INVALID_ARGUMENTS", 1, "OPEN")
    assert "404" in entry.trace.error


def test_permission_denied_is_never_retried(people, desk):
    desk.fault(mode="error", status=403, count=5)
    workflow = start(people, one_ticket())
    run_until(workflow.pk, "FAILED")
    assert attempts_of(workflow) == [("FAILED", "PERMISSION_DENIED")]
    assert len(desk.faults()) == 1 and desk.faults()[0].get("count") == 4
    assert desk.tickets() == []


def test_exhausted_attempts_dead_letter_then_replay_completes_with_the_same_key(people, desk, api):
    policy.update("ticket.create", by="test", max_attempts=3)
    desk.fault(mode="error", status=503, count=50)
    workflow = start(people, one_ticket())
    run_until(workflow.pk, "FAILED")
    step = workflow.steps.get()
    assert attempts_of(workflow) == [("FAILED", "TRANSIENT")] * 3
    entry = DeadLetter.objects.get(step=step)
    assert entry.attempt_count == 3

    desk.clear_faults()
    preview = api["operator"].get(f"/dead-letters/{entry.pk}/preview").json()
    assert preview["operation_key"] == step.operation_key and preview["will_run"] is True
    response = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {"reason": "desk is back"})
    assert response.status_code == 202
    assert response.json()["status"] == "REPLAYED"
    run_until(workflow.pk, "COMPLETE")
    assert [a.operation_key for a in Attempt.objects.filter(step=step)] == [step.operation_key] * 4
    tickets = desk.tickets()
    assert len(tickets) == 1 and tickets[0]["idempotency_key"] == step.operation_key


def test_an_exhausted_deadline_dead_letters(people, desk):
    desk.fault(mode="error", status=503, count=1000)
    workflow = start(people, one_ticket(deadline_seconds=2))
    run_until(workflow.pk, "FAILED", timeout=10)
    step = workflow.steps.get()
    assert step.status == "DEAD_LETTERED"
    last = Attempt.objects.filter(step=step).order_by("number").last()
    # The deadline caps the whole operation, it does not restart per attempt:
    # no attempt starts after it, and the step is given up, not left waiting.
    assert last.started_at < workflow.deadline
    assert not Attempt.objects.filter(step=step, started_at__gte=workflow.deadline).exists()
    assert Attempt.objects.filter(step=step).count() > 1


def test_connection_refused_is_dependency_unavailable_and_retried(people, desk, settings):
    from tests.support.desk import free_port

    settings.TICKET_DESK_URL = f"http://127.0.0.1:{free_port()}"
    policy.update("ticket.create", by="test", max_attempts=2)
    workflow = start(people, one_ticket())
    run_until(workflow.pk, "FAILED")
    assert attempts_of(workflow) == [("FAILED", "DEPENDENCY_UNAVAILABLE")] * 2


def test_a_dropped_answer_is_reconciled_by_lookup_not_repeated(people, desk):
    desk.fault(mode="commit_then_drop", count=1)
    workflow = start(people, one_ticket())
    run_until(workflow.pk, "COMPLETE")
    assert attempts_of(workflow) == [("RECONCILED", "TRANSIENT")]
    assert len(desk.tickets()) == 1
    assert [e["path"] for e in desk.ledger()] == ["/tickets"]  # the change happened once, before the drop


def test_a_read_timeout_is_reconciled_before_any_retry(people, desk, settings):
    settings.ACTION_TIMEOUT_SECONDS = 0.3
    desk.fault(mode="latency", ms=800)
    workflow = start(people, one_ticket())
    step = workflow.steps.get()
    run_until(workflow.pk, {"COMPLETE", "FAILED"})
    desk.clear_faults()
    # One request, which the lookup found landed: none is left in flight at
    # the desk when the next test resets it.
    assert attempts_of(workflow) == [("RECONCILED", "TIMEOUT")]
    assert len(desk.tickets(step.operation_key)) == 1


def webhook(desk, **declared):
    return {
        "name": "webhook",
        "submission_key": "hook",
        "steps": [
            {
                "key": "hook",
                "action": "http.post",
                "args": {"url": f"{desk.url}/tickets", "json": {"title": "via hook"}, **declared},
            }
        ],
    }


def test_http_post_to_a_receiver_that_honours_the_key_retries_safely(people, desk):
    desk.fault(mode="error", status=502, count=1)
    workflow = start(people, webhook(desk, receiver_honours_idempotency_key=True))
    run_until(workflow.pk, "COMPLETE")
    step = workflow.steps.get()
    assert attempts_of(workflow) == [("FAILED", "TRANSIENT"), ("SUCCEEDED", "")]
    assert [t["idempotency_key"] for t in desk.tickets()] == [step.operation_key]


def test_http_post_without_the_declaration_is_not_retried_after_an_error(people, desk):
    desk.fault(mode="error", status=502, count=1)
    workflow = start(people, webhook(desk))
    run_until(workflow.pk, "FAILED")
    assert desk.faults() == []
    assert attempts_of(workflow) == [("FAILED", "TRANSIENT")]
    assert workflow.steps.get().status == "DEAD_LETTERED"
    assert desk.tickets() == []


def test_http_post_whose_answer_was_lost_is_in_doubt_unless_the_receiver_honours_the_key(people, desk):
    """The desk acts, then drops the connection: the outcome is unknown. An
    undeclared webhook can be neither looked up nor safely repeated."""
    desk.fault(mode="commit_then_drop", count=1)
    workflow = start(people, webhook(desk))
    run_until(workflow.pk, "NEEDS_ATTENTION")
    assert desk.faults() == []
    assert workflow.steps.get().status == "IN_DOUBT"
    assert attempts_of(workflow) == [("UNKNOWN", "TRANSIENT")]
    assert len(desk.tickets()) == 1


def test_http_post_whose_answer_was_lost_is_repeated_when_the_receiver_honours_the_key(people, desk):
    desk.fault(mode="commit_then_drop", count=1)
    workflow = start(people, webhook(desk, receiver_honours_idempotency_key=True))
    run_until(workflow.pk, "COMPLETE")
    assert desk.faults() == []
    step = workflow.steps.get()
    assert attempts_of(workflow) == [("UNKNOWN", "TRANSIENT"), ("SUCCEEDED", "")]
    assert step.result["status"] == 200  # the desk knew the key: the same ticket, no second one
    assert [t["idempotency_key"] for t in desk.tickets()] == [step.operation_key]


def test_email_is_never_retried_blindly(people, desk, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 1  # nothing listens: refused
    body = {
        "name": "mail",
        "submission_key": "mail",
        "steps": [
            {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": "b"}}
        ],
    }
    workflow = start(people, body)
    run_until(workflow.pk, "FAILED")
    assert attempts_of(workflow) == [("FAILED", "DEPENDENCY_UNAVAILABLE")]


def test_email_is_sent_once(people, desk, settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)
    body = {
        "name": "mail",
        "submission_key": "mail-ok",
        "steps": [
            {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "Hello", "body": "b"}}
        ],
    }
    workflow = start(people, body)
    run_until(workflow.pk, "COMPLETE")
    sent = [p.read_text() for p in tmp_path.iterdir()]
    assert len(sent) == 1 and "Subject: Hello" in sent[0]


# --- resume with current policy ----------------------------------------------


def _fail_once_then_wait(people, desk):
    desk.fault(mode="error", status=503, count=1)
    workflow = start(people, one_ticket())
    deadline = time.monotonic() + 10
    from workflows.engine import execution

    while Step.objects.get(workflow=workflow).status != "WAITING_RETRY" and time.monotonic() < deadline:
        step = execution.claim(workflow.pk)
        if step:
            execution.execute(step)
    step = Step.objects.get(workflow=workflow)
    assert step.status == "WAITING_RETRY"
    return workflow, step


def test_an_action_disabled_while_a_retry_waits_ends_blocked_with_no_effect(people, desk):
    workflow, step = _fail_once_then_wait(people, desk)
    policy.update("ticket.create", by="admin", enabled=False)
    run_until(workflow.pk, "FAILED")
    step.refresh_from_db()
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert desk.tickets() == [] and desk.ledger() == []
    assert Attempt.objects.filter(step=step).count() == 1


def test_an_approval_older_than_its_lifetime_blocks_and_a_fresh_one_unblocks(people, desk):
    policy.update("ticket.create", by="admin", risk="HIGH", approval_ttl_seconds=60)
    workflow = plans.submit(people["agent"], one_ticket()).workflow
    decide.approve(workflow, by=people["reviewer"])
    workflow.approvals.update(created_at=timezone.now() - timedelta(minutes=5))
    run_until(workflow.pk, "FAILED")
    step = workflow.steps.get()
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert desk.ledger() == []

    decide.approve(workflow, by=people["reviewer2"], comment="still wanted")
    run_until(workflow.pk, "COMPLETE")
    assert len(desk.tickets()) == 1


def test_a_removed_approver_blocks_until_another_reviewer_approves(people, desk):
    workflow = start(people, one_ticket())
    people["reviewer"].groups.clear()
    run_until(workflow.pk, "FAILED")
    assert workflow.steps.get().status == "BLOCKED"
    assert desk.ledger() == []
    decide.approve(workflow, by=people["reviewer2"])
    run_until(workflow.pk, "COMPLETE")
    assert len(desk.tickets()) == 1


def test_replay_rechecks_policy_first(people, desk, api):
    body = {
        "name": "bad",
        "submission_key": "bad",
        "steps": [
            {"key": "find", "action": "noop", "args": {"ticket": 424242}},
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "x"},
            },
        ],
    }
    workflow = start(people, body)
    run_until(workflow.pk, "FAILED")
    entry = DeadLetter.objects.get(workflow=workflow)
    policy.update("ticket.comment", by="admin", enabled=False)
    preview = api["operator"].get(f"/dead-letters/{entry.pk}/preview").json()
    assert preview["will_run"] is False
    assert {c["name"]: c["ok"] for c in preview["checks"]}["action enabled"] is False
    response = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {"reason": "try again"})
    assert response.status_code == 409
    entry.refresh_from_db()
    assert entry.status == "OPEN"


def test_a_blocked_workflow_is_approved_again_from_the_console(people, desk, client):
    from tests.support.personas import PASSWORD

    workflow = start(people, one_ticket())
    people["reviewer"].groups.clear()
    run_until(workflow.pk, "FAILED")
    assert client.login(username="reviewer2", password=PASSWORD)
    page = client.get(f"/workflows/{workflow.pk}/")
    assert b"Approve again" in page.content
    client.post(f"/workflows/{workflow.pk}/approve", {"comment": "re-checked"})
    workflow.refresh_from_db()
    assert workflow.status == "RUNNING"
    run_until(workflow.pk, "COMPLETE")
    assert len(desk.tickets()) == 1


@pytest.mark.live
def test_a_retry_wait_survives_a_worker_restart(people, start_worker, desk):
    """The due time lives in the database: killing the worker mid-wait
    neither loses the retry nor shortens the wait."""
    desk.fault(mode="rate_limit", retry_after=3, count=1)
    workflow = start(people, one_ticket())
    worker = start_worker()
    deadline = time.monotonic() + 20
    while not Attempt.objects.filter(step__workflow=workflow, failure_class="RATE_LIMITED").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    worker.kill()  # SIGKILL while the retry waits
    assert not worker.alive
    step = Step.objects.get(workflow=workflow)
    assert step.status == "WAITING_RETRY" and step.next_attempt_at is not None
    start_worker(name="restarted")
    from tests.support.running import wait_for_status

    wait_for_status(workflow.pk, "COMPLETE")
    first, second = Attempt.objects.filter(step=step).order_by("number")
    assert (second.started_at - first.finished_at).total_seconds() >= 3.0
    assert len(desk.tickets()) == 1


def test_the_workflow_page_draws_a_timeline_of_attempts(people, desk, client):
    from tests.support.personas import PASSWORD

    desk.fault(mode="error", status=503, count=1)
    workflow = start(people, one_ticket())
    run_until(workflow.pk, "COMPLETE")
    assert client.login(username="auditor", password=PASSWORD)
    html = client.get(f"/workflows/{workflow.pk}/").content.decode()
    assert 'class="timeline"' in html
    assert "open (1 retry)" in html
    assert "attempt 1: FAILED TRANSIENT" in html and "attempt 2: SUCCEEDED" in html
