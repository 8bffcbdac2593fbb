"""Kill a real worker with SIGKILL at every checkpoint boundary, restart it,
and prove the work finishes with exactly one effect per operation."""

import pytest

from tests.support import deciding as decide
from tests.support.crashing import CRASH_ENV, crash_at
from tests.support.plans import ticket_plan
from tests.support.running import wait_for_status
from workflows.audit import journal
from workflows.engine import failpoints, policy
from workflows.models import Attempt, AuditEvent, DeadLetter, Step
from workflows.operations import plans, resolution

# Also run through PgBouncer in transaction mode (make test-pooled).
pytestmark = [pytest.mark.live, pytest.mark.pooled]


@pytest.fixture
def desk(proof_desk):
    """The desk of every test here requires approval proofs (docs/explanation/approval-proofs.md#approval-proof):
    crashes, repeats and reconciliation must still see one effect per key,
    each carried by a proof the desk verified."""
    return proof_desk


def submit_and_approve(people, body):
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer"])
    return workflow


def assert_exactly_once(workflow, desk):
    """One ticket per ticket.create key; every change on the desk has an
    attempt carrying its operation key that started before it, and came
    with a valid approval proof that attempt was issued; chain intact.
    (That the attempt was committed before perform() ran, the timestamps
    cannot show: tests/engine/test_execution.py shows it from a second connection.)"""
    steps = list(Step.objects.filter(workflow=workflow))
    for step in steps:
        if step.action == "ticket.create":
            assert len(desk.tickets(step.operation_key)) == 1, step.key
    ledger = desk.ledger()
    keys = [entry["idempotency_key"] for entry in ledger]
    assert len(keys) == len(set(keys)), f"an operation took effect twice: {keys}"
    for entry in ledger:
        first = Attempt.objects.filter(operation_key=entry["idempotency_key"]).order_by("started_at").first()
        assert first is not None, f"effect without an attempt: {entry}"
        assert first.started_at.isoformat() < entry["at"].replace("Z", "+00:00"), entry
        issued = Attempt.objects.filter(operation_key=entry["idempotency_key"]).values_list("proof_jti", flat=True)
        assert entry["proof"]["wf"] == str(workflow.pk) and entry["proof"]["jti"] in set(issued), entry
    assert journal.verify().ok


@pytest.mark.parametrize("point", failpoints.ALL)
def test_a_crash_at_each_checkpoint_recovers_to_complete_with_one_effect(people, start_worker, desk, tmp_path, point):
    workflow = submit_and_approve(people, ticket_plan())
    crash_at(start_worker, tmp_path, point)
    wait_for_status(workflow.pk, "COMPLETE")
    assert_exactly_once(workflow, desk)
    ticket = desk.tickets()[0]
    assert ticket["status"] == "closed" and len(ticket["comments"]) == 1


def test_an_answer_lost_after_commit_is_reconciled_not_repeated(people, start_worker, desk, tmp_path):
    desk.fault(mode="commit_then_drop", count=2)  # the create and the comment both lose their answers
    workflow = submit_and_approve(people, ticket_plan())
    start_worker(**CRASH_ENV)
    wait_for_status(workflow.pk, "COMPLETE")
    assert desk.faults() == []
    assert_exactly_once(workflow, desk)
    statuses = list(Attempt.objects.filter(step__workflow=workflow, step__key="open").values_list("status", flat=True))
    assert statuses[0] in ("UNKNOWN", "RECONCILED")


@pytest.mark.parametrize("point", [failpoints.AFTER_REQUESTED, failpoints.AFTER_PERFORM])
def test_a_desk_without_idempotency_still_gets_one_ticket(people, start_worker, desk, tmp_path, point):
    """Reconciliation by lookup, not the remote's idempotency, prevents the duplicate."""
    desk.fault(mode="ignore_idempotency")
    workflow = submit_and_approve(people, ticket_plan())
    crash_at(start_worker, tmp_path, point)
    wait_for_status(workflow.pk, "COMPLETE")
    assert len(desk.faults()) == 1  # still ignoring idempotency throughout
    assert_exactly_once(workflow, desk)


def test_a_crash_inside_a_replay_recovers(people, start_worker, desk, tmp_path):
    policy.update("ticket.create", by="test", max_attempts=1)
    desk.fault(mode="error", status=503, count=1)
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    decide.approve(workflow, by=people["reviewer"])
    from tests.support.running import run_until

    run_until(workflow.pk, "FAILED")
    from workflows.operations import deadletters

    deadletters.replay(DeadLetter.objects.get(workflow=workflow), by=people["operator"], reason="desk is back")
    crash_at(start_worker, tmp_path, f"replay:{failpoints.AFTER_PERFORM}")
    wait_for_status(workflow.pk, "COMPLETE")
    assert_exactly_once(workflow, desk)


@pytest.mark.parametrize("point", [failpoints.AFTER_REQUESTED, failpoints.AFTER_PERFORM])
def test_a_crash_mid_email_leaves_it_in_doubt_for_an_operator(people, start_worker, desk, tmp_path, point):
    mail_dir = tmp_path / "mail"
    body = {
        "name": "notify",
        "submission_key": "mail",
        "steps": [
            {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": "b"}}
        ],
    }
    workflow = submit_and_approve(people, body)
    crash_at(start_worker, tmp_path, point, EMAIL_FILE_PATH=str(mail_dir))
    wait_for_status(workflow.pk, "NEEDS_ATTENTION")
    step = workflow.steps.get()
    assert step.status == "IN_DOUBT"
    sent = list(mail_dir.iterdir()) if mail_dir.exists() else []
    assert len(sent) == (1 if point == failpoints.AFTER_PERFORM else 0)  # never sent a second time

    if sent:
        resolution.resolve(
            step,
            by=people["operator"],
            decision="happened",
            reason="found it in the outbox",
            external_ref=f"mail:{sent[0].name}",
        )
    else:
        resolution.resolve(step, by=people["operator"], decision="not_happened", reason="not in the outbox")
    wait_for_status(workflow.pk, "COMPLETE")
    assert len(list(mail_dir.iterdir())) == 1
    assert journal.verify().ok


def webhook_plan(desk, **declared) -> dict:
    """An http.post to the desk's `POST /tickets`, which honours Idempotency-Key."""
    args = {"url": f"{desk.url}/tickets", "json": {"title": "Deploy finished", "body": "v2.3 is live"}, **declared}
    return {
        "name": "webhook",
        "submission_key": "hook",
        "steps": [{"key": "hook", "action": "http.post", "args": args}],
    }


@pytest.mark.parametrize("receiver", ["honours keys", "ignores keys"])
def test_a_crash_after_an_undeclared_webhook_leaves_it_in_doubt_never_repeated(
    people, start_worker, desk, tmp_path, receiver
):
    """Without `receiver_honours_idempotency_key: true` the engine may not
    assume the receiver drops a repeat, and it cannot look the call up: an
    effect that happened before the crash goes IN_DOUBT, whatever the
    receiver would have done with a second call."""
    if receiver == "ignores keys":
        desk.fault(mode="ignore_idempotency")
    workflow = submit_and_approve(people, webhook_plan(desk))
    crash_at(start_worker, tmp_path, failpoints.AFTER_PERFORM)
    wait_for_status(workflow.pk, "NEEDS_ATTENTION")
    step = workflow.steps.get()
    assert step.status == "IN_DOUBT"
    assert list(step.attempts.values_list("status", flat=True)) == ["UNKNOWN"]
    [ticket] = desk.tickets()  # the effect happened before the crash, once
    assert ticket["idempotency_key"] == step.operation_key

    resolution.resolve(
        step,
        by=people["operator"],
        decision="happened",
        reason="the desk has the ticket",
        external_ref=f"ticket:{ticket['id']}",
    )
    wait_for_status(workflow.pk, "COMPLETE")
    assert [entry["idempotency_key"] for entry in desk.ledger()] == [step.operation_key]
    assert len(desk.tickets()) == 1
    if receiver == "ignores keys":
        assert [fault["mode"] for fault in desk.faults()] == ["ignore_idempotency"]  # on throughout
    assert journal.verify().ok


def test_a_crash_after_a_declared_webhook_repeats_it_with_the_same_key_for_one_ticket(
    people, start_worker, desk, tmp_path
):
    workflow = submit_and_approve(people, webhook_plan(desk, receiver_honours_idempotency_key=True))
    crash_at(start_worker, tmp_path, failpoints.AFTER_PERFORM)
    wait_for_status(workflow.pk, "COMPLETE")
    step = workflow.steps.get()
    attempts = list(step.attempts.order_by("number").values_list("status", "operation_key"))
    # The doomed cluster's own loop may retry first (its child's pid is gone)
    # and be killed mid-retry: every attempt before the last is then UNKNOWN.
    assert attempts[-1] == ("SUCCEEDED", step.operation_key)
    assert attempts[:-1] and set(attempts[:-1]) == {("UNKNOWN", step.operation_key)}
    # The repeat reached the desk, which answered 200 with the same ticket
    # (201 is a new one) and recorded no second change.
    assert step.result["status"] == 200
    assert [entry["idempotency_key"] for entry in desk.ledger()] == [step.operation_key]
    assert [ticket["idempotency_key"] for ticket in desk.tickets()] == [step.operation_key]
    assert journal.verify().ok


def noop_plan(n: int, steps: int = 3) -> dict:
    return {
        "name": f"batch {n}",
        "submission_key": f"batch-{n}",
        "steps": [{"key": f"s{k}", "action": "noop", "args": {"n": k}} for k in range(steps)],
    }


@pytest.mark.parametrize("point", failpoints.ALL)
def test_a_crash_inside_a_shared_batch_recovers_every_step(people, start_worker, tmp_path, point):
    """Steps that share their checkpoint commits (in-process idempotent
    actions): a worker killed at any point of a batch leaves each step where
    recovery finishes it, with one SUCCEEDED attempt and a REQUESTED one
    committed before every perform."""
    workflows = [submit_and_approve(people, noop_plan(n)) for n in range(4)]
    # One worker, so that its first claim holds all four first steps (two
    # would share them, and the one that dies might hold a single step).
    crash_at(start_worker, tmp_path, point, Q_WORKERS="1")
    for workflow in workflows:
        wait_for_status(workflow.pk, "COMPLETE")
    doomed_pid = (tmp_path / "failpoints.log").read_text().split()[0]
    doomed = Attempt.objects.filter(worker__endswith=f":{doomed_pid}")
    # The failpoint fired inside a shared batch: the doomed worker requested
    # attempts for several steps, all in the claim's one commit.
    requested = AuditEvent.objects.filter(
        verb="attempt.requested", object_id__in=[str(pk) for pk in doomed.values_list("pk", flat=True)]
    )
    assert requested.count() >= 2, "the batch held one step only"
    assert requested.values("at").distinct().count() == 1
    for step in Step.objects.filter(workflow__in=workflows):
        statuses = list(step.attempts.order_by("number").values_list("status", flat=True))
        assert step.status == "COMPLETE"
        assert statuses.count("SUCCEEDED") == 1 and statuses[-1] == "SUCCEEDED", (step.key, statuses)
        assert set(statuses) <= {"SUCCEEDED", "UNKNOWN"}, (step.key, statuses)
    assert journal.verify().ok
