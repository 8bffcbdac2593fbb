"""Undo is an explicit, authorized business action run by the same engine."""

import pytest

from tests.support import deciding as decide
from tests.support.api import HttpApi
from tests.support.compensating import closes_per_ticket, failed_workflow, three_steps
from tests.support.crashing import CRASH_ENV, crash_at
from tests.support.running import run_until, wait_for_status
from workflows.engine import policy
from workflows.errors import NotAllowed, WrongState
from workflows.models import AuditEvent, Compensation, DeadLetter, Step
from workflows.operations import compensation, deadletters, plans


@pytest.mark.live
@pytest.mark.parametrize("crash", [None, "compensation:after_perform", "compensation:after_requested"])
def test_step_three_dead_letters_and_an_authorized_compensation_closes_one_and_two(
    people, live_server, start_worker, desk, tmp_path, crash
):
    operator, reviewer2 = HttpApi(live_server.url, people["operator"]), HttpApi(live_server.url, people["reviewer2"])
    workflow = plans.submit(people["agent"], three_steps()).workflow
    decide.approve(workflow, by=people["reviewer"])
    first_worker = start_worker(name="first", **CRASH_ENV)
    wait_for_status(workflow.pk, "FAILED")
    assert Step.objects.get(workflow=workflow, key="third").status == "DEAD_LETTERED"
    assert len(desk.tickets()) == 2

    requested = operator.post(f"/workflows/{workflow.pk}/compensations", {"reason": "incident cancelled"})
    assert requested.status_code == 201, requested.text
    body = requested.json()
    assert (body["status"], body["requested_by"], body["authorized_by"]) == ("REQUESTED", "operator", None)
    assert [s["compensates"] for s in body["steps"]] == ["second", "first"]  # reverse order of completion
    assert closes_per_ticket(desk) == {}  # nothing runs before authorization

    if crash:
        first_worker.stop()  # the doomed worker below must be the one that runs the undo
    authorized = reviewer2.post(f"/compensations/{body['id']}/authorize", {"reason": "agreed"})
    assert authorized.status_code == 200
    assert authorized.json()["authorized_by"] == "reviewer2"
    if crash:
        crash_at(start_worker, tmp_path, crash)
    wait_for_status(workflow.pk, "COMPENSATED")

    tickets = desk.tickets()
    assert [t["status"] for t in tickets] == ["closed", "closed"]
    assert sorted(closes_per_ticket(desk).values()) == [1, 1]  # exactly one close per ticket
    comp = Compensation.objects.get(pk=body["id"])
    assert comp.status == "COMPENSATED"
    originals = {s.key: s for s in Step.objects.filter(workflow=workflow, lane=0)}
    assert (originals["first"].status, originals["second"].status) == ("COMPENSATED", "COMPENSATED")
    undo_keys = {s.operation_key for s in Step.objects.filter(workflow=workflow, lane=comp.lane)}
    assert undo_keys.isdisjoint({s.operation_key for s in originals.values()})  # their own operation keys


def test_the_requester_cannot_authorize_and_only_operators_request(people, desk, api):
    workflow = failed_workflow(people)
    assert api["reviewer"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "x"}).status_code == 403
    comp = compensation.request(workflow, by=people["admin"], reason="undo it")  # admin is operator and reviewer
    with pytest.raises(NotAllowed):
        decide.authorize(comp, by=people["admin"])
    assert api["admin"].post(f"/compensations/{comp.pk}/authorize", {}).status_code == 403
    assert api["operator"].post(f"/compensations/{comp.pk}/authorize", {}).status_code == 403
    comp.refresh_from_db()
    assert comp.status == "REQUESTED"


def test_a_reviewer_may_decline_with_a_reason(people, desk, api):
    workflow = failed_workflow(people)
    comp = compensation.request(workflow, by=people["operator"], reason="undo it")
    assert api["reviewer2"].post(f"/compensations/{comp.pk}/decline", {"reason": ""}).status_code == 400
    response = api["reviewer2"].post(f"/compensations/{comp.pk}/decline", {"reason": "tickets are still needed"})
    assert response.status_code == 200 and response.json()["status"] == "DECLINED"
    workflow.refresh_from_db()
    assert workflow.status == "FAILED"
    assert closes_per_ticket(desk) == {}
    assert api["reviewer2"].post(f"/compensations/{comp.pk}/authorize", {}).status_code == 409


def test_requests_need_a_reason_completed_steps_and_a_settled_workflow(people, desk, api):
    planned = plans.submit(people["agent"], three_steps("planned")).workflow
    assert api["operator"].post(f"/workflows/{planned.pk}/compensations", {"reason": "x"}).status_code == 409
    workflow = failed_workflow(people)
    assert api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": " "}).status_code == 400
    bad = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "x", "steps": ["third"]})
    assert bad.status_code == 400
    first = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "x"})
    assert first.status_code == 201
    again = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "y"})
    assert again.status_code == 409  # one open compensation at a time


def test_irreversible_steps_are_listed_not_skipped_silently(people, desk, api, settings):
    body = {
        "name": "ticket and mail",
        "submission_key": "mixed",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "b"}},
            {"key": "mail", "action": "email.send", "args": {"to": "a@example.com", "subject": "s", "body": "b"}},
            {
                "key": "fail",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.missing"}, "body": "x"},
            },
        ],
    }
    workflow = failed_workflow(people, body)
    comp = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "undo"}).json()
    assert [s["compensates"] for s in comp["steps"]] == ["open"]
    assert [i["key"] for i in comp["irreversible"]] == ["mail"]
    assert "cannot be undone" in comp["irreversible"][0]["why"]
    api["reviewer2"].post(f"/compensations/{comp['id']}/authorize", {})
    run_until(workflow.pk, "COMPENSATED")
    assert Step.objects.get(workflow=workflow, key="mail").status == "COMPLETE"  # still done, and listed
    event = AuditEvent.objects.get(verb="workflow.compensated")
    assert event.data["irreversible"] == ["mail"]


def test_a_subset_and_a_plan_step_own_compensation(people, desk):
    body = three_steps("subset")
    body["steps"][0]["compensation"] = {
        "action": "ticket.comment",
        "args": {"ticket_id": {"$from": "first.result.id"}, "body": "undone"},
    }
    workflow = failed_workflow(people, body)
    comp = compensation.request(workflow, by=people["operator"], reason="only the first", step_keys=["first"])
    assert [(p["compensates"], p["action"]) for p in comp.plan] == [("first", "ticket.comment")]
    decide.authorize(comp, by=people["reviewer2"])
    run_until(workflow.pk, "COMPENSATED")
    first, second = desk.tickets()
    assert [c["body"] for c in first["comments"]] == ["undone"]
    assert second["status"] == "open" and Step.objects.get(workflow=workflow, key="second").status == "COMPLETE"


def test_a_failing_undo_ends_compensation_failed_and_a_replay_finishes_it(people, desk):
    workflow = failed_workflow(people)
    comp = compensation.request(workflow, by=people["operator"], reason="undo")
    desk.fault(mode="error", status=403, count=1)  # the first close is refused
    decide.authorize(comp, by=people["reviewer2"])
    run_until(workflow.pk, "COMPENSATION_FAILED")
    comp.refresh_from_db()
    assert comp.status == "FAILED"
    event = AuditEvent.objects.filter(verb="workflow.compensation_failed").get()
    assert event.data["remaining"] == [s["key"] for s in comp.plan]  # what remains is said
    entry = DeadLetter.objects.get(step__lane=comp.lane)
    deadletters.replay(entry, by=people["operator"], reason="permission fixed")
    run_until(workflow.pk, "COMPENSATED")
    assert sorted(closes_per_ticket(desk).values()) == [1, 1]


def test_the_audit_trail_links_each_undo_to_the_effect_it_addresses(people, desk):
    workflow = failed_workflow(people)
    comp = compensation.request(workflow, by=people["operator"], reason="customer withdrew")
    decide.authorize(comp, by=people["reviewer2"], reason="confirmed")
    run_until(workflow.pk, "COMPENSATED")
    for original in Step.objects.filter(workflow=workflow, lane=0, status="COMPENSATED"):
        link = AuditEvent.objects.get(verb="step.compensating", object_id=str(original.pk))
        undo = Step.objects.get(compensates=original)
        assert link.data["operation_key"] == original.operation_key
        assert link.data["undo_operation_key"] == undo.operation_key
        assert (link.data["requested_by"], link.data["authorized_by"]) == ("operator", "reviewer2")
        assert link.data["reason"] == "customer withdrew"
        done = AuditEvent.objects.get(verb="step.compensated", object_id=str(original.pk))
        assert done.data["undo_operation_key"] == undo.operation_key


def test_a_disabled_undo_action_blocks_the_compensation(people, desk):
    workflow = failed_workflow(people)
    comp = compensation.request(workflow, by=people["operator"], reason="undo")
    policy.update("ticket.close", by="admin", enabled=False)
    decide.authorize(comp, by=people["reviewer2"])
    run_until(workflow.pk, "COMPENSATION_FAILED")
    assert closes_per_ticket(desk) == {}
    with pytest.raises(WrongState):
        decide.authorize(comp, by=people["reviewer2"])
