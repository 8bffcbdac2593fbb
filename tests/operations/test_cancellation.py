"""Cancelling a plan: by its submitter before approval, by an operator after.
No step starts after a cancel, an effect in flight is recorded, and the
completed steps can then be compensated."""

import threading
import time

import pytest
from django.db import connection

from tests.support import deciding as decide
from tests.support.locking import holding, in_thread
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import wait_for_status
from workflows import states
from workflows.engine import execution, locks
from workflows.engine.transitions import move
from workflows.models import Attempt, AuditEvent, Step, Workflow
from workflows.operations import cancellation, plans
from workflows.states import AttemptStatus, WorkflowStatus


def planned(people, key="cancel-1"):
    return plans.submit(people["agent"], ticket_plan(key)).workflow


def approved(people, key="cancel-1"):
    return decide.approve(planned(people, key), by=people["reviewer"])


def status_of(workflow):
    return Workflow.objects.get(pk=workflow.pk).status


def test_the_submitter_cancels_its_plan_before_approval(people, api):
    workflow = planned(people)
    answer = api["agent"].post(f"/workflows/{workflow.pk}/cancel", {"reason": "wrong printer"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "CANCELLED"
    event = AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.cancelled")
    assert (event.actor, event.data["reason"], event.data["from"]) == ("agent", "wrong printer", "PLANNED")
    # Nothing left to decide.
    assert api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {}).status_code == 409


@pytest.mark.parametrize("persona", ["reviewer", "operator", "auditor"])
def test_before_approval_only_the_submitter_may_cancel(people, api, persona):
    workflow = planned(people)
    answer = api[persona].post(f"/workflows/{workflow.pk}/cancel", {"reason": "not mine"})
    assert answer.status_code == 403
    assert status_of(workflow) == "PLANNED"
    assert not AuditEvent.objects.filter(verb="workflow.cancelled").exists()


@pytest.mark.parametrize("persona, expected", [("agent", 403), ("reviewer", 403), ("auditor", 403), ("operator", 200)])
def test_once_approved_only_an_operator_may_cancel(people, api, persona, expected):
    workflow = approved(people)
    answer = api[persona].post(f"/workflows/{workflow.pk}/cancel", {"reason": "incident over"})
    assert answer.status_code == expected, answer.text
    assert status_of(workflow) == ("CANCELLED" if expected == 200 else "APPROVED")


def test_another_agents_plan_is_not_found_and_an_unknown_one_neither(people, api, django_user_model):
    workflow = planned(people)
    from tests.support.api import ApiClient

    stranger = ApiClient(django_user_model.objects.create_user("stranger", password=PASSWORD))
    assert stranger.post(f"/workflows/{workflow.pk}/cancel", {"reason": "mine now"}).status_code == 404
    assert (
        api["operator"].post("/workflows/00000000-0000-0000-0000-000000000000/cancel", {"reason": "x"}).status_code
        == 404
    )
    assert status_of(workflow) == "PLANNED"


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "   "}, "reason"),
        ({"reason": 7}, "reason"),
        ({"reason": "x" * 2001}, "reason"),
    ],
)
def test_a_cancel_without_a_proper_reason_is_refused_with_the_field_and_changes_nothing(people, api, body, field):
    workflow = planned(people)
    answer = api["agent"].post(f"/workflows/{workflow.pk}/cancel", body)
    assert answer.status_code == 400
    assert field in answer.json()["error"]["fields"]
    assert status_of(workflow) == "PLANNED"
    assert not AuditEvent.objects.filter(verb="workflow.cancelled").exists()


def test_a_credential_in_the_reason_is_refused(people, api):
    workflow = planned(people)
    answer = api["agent"].post(
        f"/workflows/{workflow.pk}/cancel", {"reason": "token ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa leaked"}
    )
    assert answer.status_code == 400 and "reason" in answer.json()["error"]["fields"]
    assert status_of(workflow) == "PLANNED"


@pytest.mark.parametrize("status", ["COMPLETE", "REJECTED", "EXPIRED", "CANCELLED", "COMPENSATING"])
def test_a_finished_or_compensating_workflow_cannot_be_cancelled(people, api, status):
    workflow = approved(people)
    Workflow.objects.filter(pk=workflow.pk).update(status=status)
    answer = api["operator"].post(f"/workflows/{workflow.pk}/cancel", {"reason": "too late"})
    assert answer.status_code == 409
    assert status_of(workflow) == status


def test_the_transition_table_lists_cancel_and_compensation_after_it():
    table = states.TRANSITIONS["workflow"]
    for source in ("APPROVED", "RUNNING", "FAILED", "NEEDS_ATTENTION"):
        assert "CANCELLED" in table[source], source
    assert table["CANCELLED"] == {"COMPENSATING"} and table["REJECTED"] == {"COMPENSATING"}
    assert states.TERMINAL_WORKFLOW == {"COMPLETE", "REJECTED", "EXPIRED", "CANCELLED", "COMPENSATED"}


def test_a_step_claimed_before_the_cancel_is_refused_by_the_recheck(people, api, desk):
    workflow = approved(people)
    step = execution.claim(workflow.pk)
    assert api["operator"].post(f"/workflows/{workflow.pk}/cancel", {"reason": "stop"}).status_code == 200

    execution.execute(step)

    step.refresh_from_db()
    assert step.status == "BLOCKED" and not step.attempts.exists()
    assert "workflow not cancelled" in AuditEvent.objects.get(verb="step.blocked").data["problems"][0]
    assert desk.tickets() == []
    assert status_of(workflow) == "CANCELLED"
    assert execution.claim(workflow.pk) is None


def test_remote_steps_claimed_in_a_batch_before_the_cancel_never_start(people, api, desk):
    workflows = [approved(people, f"batch-{n}") for n in range(3)]
    batch = execution.claim_batch()
    assert len(batch) == 3
    assert api["operator"].post(f"/workflows/{workflows[0].pk}/cancel", {"reason": "stop"}).status_code == 200

    execution.run_batch(batch)

    assert Step.objects.get(workflow=workflows[0], key="open").status == "BLOCKED"
    assert not Attempt.objects.filter(step__workflow=workflows[0]).exists()
    assert len(desk.tickets()) == 2  # the other two went on


def test_a_cancel_between_the_recheck_and_the_attempt_is_seen_under_the_lock(people, api, desk):
    workflow = approved(people)
    step = execution.claim(workflow.pk)
    assert execution.policy.recheck(step) == []
    assert api["operator"].post(f"/workflows/{workflow.pk}/cancel", {"reason": "stop"}).status_code == 200

    assert execution._request_attempt(step, step.fence) is None
    assert not step.attempts.exists()


def postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no row locks: a writer holds the whole database")


@pytest.mark.django_db(transaction=True)
def test_a_cancel_waits_for_an_attempt_being_requested_and_lists_it_in_flight(people, desk):
    postgresql_only()
    workflow = approved(people)
    step = execution.claim(workflow.pk)
    release = threading.Event()
    # The attempt's transaction holds its step, as `_request_attempt` does.
    attempt = holding(lambda: execution.assert_lease(step, step.fence, "RUNNING"), release)

    cancelling, _ = in_thread(lambda: cancellation.cancel(workflow, by=people["operator"], reason="stop"))
    cancelling.join(1.5)
    waited = cancelling.is_alive()
    release.set()
    attempt.join(10)
    cancelling.join(30)

    assert waited, "the cancel did not wait for the attempt holding its step"
    assert status_of(workflow) == "CANCELLED"
    assert AuditEvent.objects.get(verb="workflow.cancelled").data["in_flight"] == ["open"]


@pytest.mark.django_db(transaction=True)
def test_an_attempt_requested_while_a_cancel_commits_waits_and_sees_it(people, desk):
    postgresql_only()
    workflow = approved(people)
    step = execution.claim(workflow.pk)
    release = threading.Event()

    def cancel_in_progress():  # the cancel's transaction, before its commit
        locked = locks.plan(workflow.pk)
        move(
            locked,
            WorkflowStatus.CANCELLED,
            actor=people["operator"],
            verb="workflow.cancelled",
            data={"reason": "stop", "in_flight": []},
        )

    cancel = holding(cancel_in_progress, release)
    requesting, result = in_thread(lambda: execution._request_attempt(step, step.fence))
    requesting.join(1.5)
    waited = requesting.is_alive()
    release.set()
    cancel.join(10)
    requesting.join(30)

    assert waited, "the attempt did not wait for the cancel holding its step"
    assert result == [None] and not step.attempts.exists()


def test_operators_cancel_from_the_workflow_page_and_the_submitter_before_approval(people, client):
    running = approved(people, "page-1")
    assert client.login(username="operator", password=PASSWORD)
    page = client.get(f"/workflows/{running.pk}/")
    assert b"Cancel plan" in page.content
    assert client.post(f"/workflows/{running.pk}/cancel", {"reason": "from the page"}).status_code == 302
    assert status_of(running) == "CANCELLED"
    assert AuditEvent.objects.get(workflow_id=running.pk, verb="workflow.cancelled").actor == "operator"

    waiting = planned(people, "page-2")
    assert b"Cancel plan" not in client.get(f"/workflows/{waiting.pk}/").content
    client.post(f"/workflows/{waiting.pk}/cancel", {"reason": "not my plan"})
    assert status_of(waiting) == "PLANNED"  # refused: before approval it is the submitter's
    client.logout()
    assert client.login(username="agent", password=PASSWORD)
    assert b"Cancel plan" in client.get(f"/workflows/{waiting.pk}/").content
    client.post(f"/workflows/{waiting.pk}/cancel", {"reason": "changed my mind"})
    assert status_of(waiting) == "CANCELLED"


def _wait(condition, timeout=60.0, explain=lambda: ""):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, explain()
        time.sleep(0.05)


@pytest.mark.live
def test_cancel_with_an_effect_in_flight_records_it_starts_nothing_else_then_compensates(
    people, api, start_worker, desk
):
    """A real worker sends the first step to the real desk, which holds it;
    an operator cancels meanwhile. The ticket's creation is recorded, the
    comment and the close never start, and an authorized compensation then
    closes the ticket the cancelled run left behind."""
    desk.fault(mode="latency", ms=4000)
    workflow = approved(people)
    start_worker("cancel")
    requested = Attempt.objects.filter(step__workflow=workflow, status=AttemptStatus.REQUESTED)
    _wait(requested.exists, explain=lambda: "the first step never went out")
    _wait(
        lambda: desk.concurrency()["in_flight"].get("POST /tickets", 0) == 1,
        explain=lambda: "the desk never held the request",
    )

    answer = api["operator"].post(f"/workflows/{workflow.pk}/cancel", {"reason": "incident resolved"})
    assert answer.status_code == 200, answer.text
    assert AuditEvent.objects.get(verb="workflow.cancelled").data["in_flight"] == ["open"]
    # Undo waits for the outcome of what is in flight.
    early = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "undo it"})
    assert early.status_code == 409 and "in flight" in early.json()["error"]["message"]

    desk.clear_faults()
    _wait(
        lambda: Step.objects.get(workflow=workflow, key="open").status == "COMPLETE",
        explain=lambda: f"open is {Step.objects.get(workflow=workflow, key='open').status}",
    )
    time.sleep(1.5)  # long enough for a worker to have started the next step, were it going to
    steps = {s.key: s for s in Step.objects.filter(workflow=workflow)}
    assert steps["open"].external_ref and steps["open"].attempts.get().status == "SUCCEEDED"
    assert (steps["note"].status, steps["close"].status) == ("PENDING", "PENDING")
    assert not Attempt.objects.filter(step__in=[steps["note"], steps["close"]]).exists()
    assert status_of(workflow) == WorkflowStatus.CANCELLED
    tickets = desk.tickets()
    assert len(tickets) == 1 and tickets[0]["status"] == "open"
    assert not any(entry["path"].endswith(("/comments", "/close")) for entry in desk.ledger())

    requested = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "undo it"})
    assert requested.status_code == 201, requested.text
    assert [s["compensates"] for s in requested.json()["steps"]] == ["open"]
    authorized = api["reviewer2"].post(f"/compensations/{requested.json()['id']}/authorize", {"reason": "agreed"})
    assert authorized.status_code == 200, authorized.text
    wait_for_status(workflow.pk, "COMPENSATED")
    assert desk.ticket(tickets[0]["id"])["status"] == "closed"
    verbs = list(AuditEvent.objects.filter(workflow_id=workflow.pk, object_type="workflow").values_list("verb", "data"))
    assert [(v, d["to"]) for v, d in verbs if "to" in d][-3:] == [
        ("workflow.cancelled", "CANCELLED"),
        ("workflow.compensating", "COMPENSATING"),
        ("workflow.compensated", "COMPENSATED"),
    ]
