"""Approve with edits (docs/explanation/review.md#review): a reviewer edits the arguments of a plan
awaiting review, which makes revision N+1 with a new plan hash; approvals of
earlier revisions no longer count, the editor cannot approve the revision
they made, the page shows what changed field by field, the audit trail says
who changed what, and the agent gets `workflow.revised`."""

import json

import pytest

from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import wait_for_status
from tests.support.seeing import Client
from tests.support.webhooks import secret_for
from workflows.engine import policy
from workflows.models import Approval, AuditEvent, PlanRevision, Step, Workflow
from workflows.webhooks.models import WebhookDelivery

TITLE_EDIT = {"key": "open", "args": {"title": "Printer on fire, floor 4", "body": "Floor 4, not 3"}}


def submitted(api, key="revise-1", **extra) -> str:
    answer = api["agent"].post("/workflows", ticket_plan(key, **extra))
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def revise(api, persona, workflow_id, steps, comment="fix the floor"):
    return api[persona].post(f"/workflows/{workflow_id}/revise", {"steps": steps, "comment": comment})


def console(persona):
    client = Client()
    assert client.login(username=persona, password=PASSWORD)
    return client


def test_an_edit_makes_revision_two_with_a_new_hash_and_records_who_changed_what(api):
    workflow_id = submitted(api)
    before = api["agent"].get(f"/workflows/{workflow_id}").json()

    answer = revise(api, "reviewer", workflow_id, [TITLE_EDIT])

    assert answer.status_code == 200, answer.content
    after = answer.json()
    assert after["revision"] == 2 and after["plan_hash"] != before["plan_hash"]
    assert [(r["number"], r["plan_hash"], r["by"]) for r in after["revisions"]] == [
        (1, before["plan_hash"], "agent"),
        (2, after["plan_hash"], "reviewer"),
    ]
    assert Step.objects.get(workflow_id=workflow_id, key="open").args == TITLE_EDIT["args"]
    # The steps not listed are as they were, and the original plan is kept as revision 1.
    assert Step.objects.get(workflow_id=workflow_id, key="note").args == ticket_plan()["steps"][1]["args"]
    assert (
        PlanRevision.objects.get(workflow_id=workflow_id, number=1).plan[0]["args"]
        == (ticket_plan()["steps"][0]["args"])
    )
    event = AuditEvent.objects.get(workflow_id=workflow_id, verb="workflow.revised")
    assert event.actor == "reviewer"
    assert event.data["revision"] == 2 and event.data["comment"] == "fix the floor"
    assert event.data["changes"] == [
        {"step": "open", "field": "body", "from": "Floor 3", "to": "Floor 4, not 3"},
        {"step": "open", "field": "title", "from": "Printer on fire", "to": "Printer on fire, floor 4"},
    ]


def test_the_editor_cannot_approve_their_revision_and_another_reviewer_can(api):
    workflow_id = submitted(api)
    revise(api, "reviewer", workflow_id, [TITLE_EDIT])

    refused = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "mine"})
    assert refused.status_code == 403
    assert "co-author" in refused.json()["error"]["message"]
    assert not Approval.objects.filter(workflow_id=workflow_id).exists()

    approved = api["reviewer2"].post(f"/workflows/{workflow_id}/approve", {"comment": "fine"})
    assert approved.status_code == 200 and approved.json()["status"] == "APPROVED"
    assert Approval.objects.get(workflow_id=workflow_id).revision == 2


def test_approvals_of_an_earlier_revision_no_longer_count(api):
    policy.update("ticket.create", by="admin", approvals_required=2)
    workflow_id = submitted(api)
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {}).json()["status"] == "PLANNED"

    revise(api, "reviewer2", workflow_id, [TITLE_EDIT])
    assert api["admin"].post(f"/workflows/{workflow_id}/approve", {}).json()["status"] == "PLANNED"  # 1 of 2
    # The reviewer approved revision 1 only: they decide on revision 2 again.
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {}).json()["status"] == "APPROVED"


def test_a_plan_edited_back_to_an_earlier_hash_still_needs_fresh_approvals(api):
    policy.update("ticket.create", by="admin", approvals_required=2)
    workflow_id = submitted(api)
    original = ticket_plan()["steps"][0]["args"]
    api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    first_hash = Workflow.objects.get(pk=workflow_id).plan_hash

    revise(api, "reviewer2", workflow_id, [TITLE_EDIT])
    back = revise(api, "admin", workflow_id, [{"key": "open", "args": original}], comment="as it was").json()
    assert back["revision"] == 3 and back["plan_hash"] == first_hash

    # reviewer2 edited revision 2, not 3: still one of the plan's authors, they may not approve any revision.
    refused = api["reviewer2"].post(f"/workflows/{workflow_id}/approve", {})
    assert refused.status_code == 403 and "co-author" in refused.json()["error"]["message"]
    # The reviewer's revision-1 approval does not count: theirs afresh is the first of two.
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {}).json()["status"] == "PLANNED"


@pytest.mark.parametrize(
    "steps, field",
    [
        ([{"key": "open", "args": {"title": 5}}], "steps.0.args.title"),
        ([{"key": "open", "args": {"title": "t", "colour": "red"}}], "steps.0.args.colour"),
        ([{"key": "open", "args": {"title": "t", "body": "ghp_" + "a" * 36}}], "steps.0.args.body"),
        ([{"key": "nope", "args": {"title": "t"}}], "steps.0.key"),
        (
            [TITLE_EDIT, {"key": "note", "args": {"ticket_id": {"$from": "later.result.id"}, "body": "b"}}],
            "steps.1.args.ticket_id",
        ),
        ([TITLE_EDIT, TITLE_EDIT], "steps.1.key"),
        ([{"key": "open", "args": ticket_plan()["steps"][0]["args"]}], "steps"),  # changes nothing
    ],
)
def test_an_invalid_edit_is_refused_with_the_field_and_changes_nothing(api, steps, field):
    workflow_id = submitted(api)
    before = Workflow.objects.get(pk=workflow_id)

    answer = revise(api, "reviewer", workflow_id, steps)

    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"], answer.json()
    after = Workflow.objects.get(pk=workflow_id)
    assert (after.revision, after.plan_hash, after.plan) == (1, before.plan_hash, before.plan)
    assert not PlanRevision.objects.exists() and not AuditEvent.objects.filter(verb="workflow.revised").exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"steps": []},
        {"steps": [{"key": "open"}]},
        {"steps": [{"key": "open", "args": []}]},
        {"steps": [{**TITLE_EDIT, "action": "noop"}]},
        {"steps": [TITLE_EDIT], "x": 1},
        {"steps": [TITLE_EDIT], "comment": "token ghp_" + "a" * 36},
    ],
)
def test_a_malformed_revision_request_is_refused(api, body):
    workflow_id = submitted(api)
    answer = api["reviewer"].post(f"/workflows/{workflow_id}/revise", body)
    assert answer.status_code in (400, 422), answer.content
    assert Workflow.objects.get(pk=workflow_id).revision == 1


def test_only_a_reviewer_other_than_the_submitter_edits_and_only_while_planned(api, people):
    workflow_id = submitted(api)
    for persona in ("agent", "operator", "auditor"):
        assert revise(api, persona, workflow_id, [TITLE_EDIT]).status_code == 403, persona
    api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    assert revise(api, "reviewer2", workflow_id, [TITLE_EDIT]).status_code == 409
    assert Workflow.objects.get(pk=workflow_id).revision == 1


def test_the_agent_gets_workflow_revised_with_the_new_revision(api):
    secret_for("agent")
    workflow_id = submitted(api, callback_url="https://hooks.example.com/in")
    revise(api, "reviewer", workflow_id, [TITLE_EDIT])
    delivery = WebhookDelivery.objects.get(event="workflow.revised")
    body = json.loads(delivery.body)
    assert body["data"]["revision"] == 2 and body["data"]["workflow"]["revision"] == 2
    assert body["data"]["changes"][1]["to"] == "Printer on fire, floor 4"


def test_what_runs_is_the_approved_revision(api, start_worker, desk):
    start_worker()
    workflow_id = submitted(api)
    revise(api, "reviewer", workflow_id, [TITLE_EDIT])
    api["reviewer2"].post(f"/workflows/{workflow_id}/approve", {"comment": "fine"})
    wait_for_status(workflow_id, "COMPLETE")
    [ticket] = desk.tickets()
    assert (ticket["title"], ticket["body"]) == ("Printer on fire, floor 4", "Floor 4, not 3")


def test_a_reviewer_edits_in_the_console_and_the_page_shows_the_diff(api):
    workflow_id = submitted(api)
    reviewer = console("reviewer")
    form = reviewer.get(f"/workflows/{workflow_id}/revise").content.decode()
    assert 'name="open:title" value="Printer on fire"' in form
    assert 'name="note:ticket_id"' in form and "$from" in form  # a reference is edited as JSON

    saved = reviewer.post(
        f"/workflows/{workflow_id}/revise",
        {
            "open:title": "Printer on fire, floor 4",
            "open:body": "Floor 3",
            "note:ticket_id": '{"$from": "open.result.id"}',
            "note:body": "Extinguisher on its way",
            "close:ticket_id": '{"$from": "open.result.id"}',
            "comment": "wrong floor",
        },
        follow=True,
    )
    page = saved.content.decode()
    assert Workflow.objects.get(pk=workflow_id).revision == 2
    assert 'data-testid="revisions"' in page and "Printer on fire, floor 4" in page and "wrong floor" in page
    assert 'data-testid="co-author"' in page
    assert f'formaction="/workflows/{workflow_id}/approve"' not in page  # no Approve button for the editor
    other = console("reviewer2").get(f"/workflows/{workflow_id}/").content.decode()
    assert f'formaction="/workflows/{workflow_id}/approve"' in other


def test_the_console_form_shows_each_error_and_saves_nothing(api):
    workflow_id = submitted(api)
    reviewer = console("reviewer")
    bad_json = reviewer.post(
        f"/workflows/{workflow_id}/revise",
        {
            "open:title": "<b>x</b>",
            "open:body": "Floor 3",
            "note:ticket_id": '{"$from": ',
            "note:body": "Extinguisher on its way",
            "close:ticket_id": '{"$from": "open.result.id"}',
        },
    )
    assert bad_json.status_code == 400
    page = bad_json.content.decode()
    assert 'data-testid="error-note:ticket_id"' in page and "Not valid JSON" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page  # what was typed comes back, escaped

    too_long = reviewer.post(
        f"/workflows/{workflow_id}/revise",
        {
            "open:title": "x" * 500,
            "open:body": "Floor 3",
            "note:ticket_id": '{"$from": "open.result.id"}',
            "note:body": "Extinguisher on its way",
            "close:ticket_id": '{"$from": "open.result.id"}',
        },
    )
    assert too_long.status_code == 400
    assert 'data-testid="error-open:title"' in too_long.content.decode()
    assert Workflow.objects.get(pk=workflow_id).revision == 1
    assert console("agent").get(f"/workflows/{workflow_id}/revise").status_code == 403


@pytest.mark.parametrize("value", ['{"$from": 1e400}', "NaN", "Infinity", '"\\u0000"'])
def test_the_console_form_refuses_numbers_json_cannot_hold_and_nul(api, value):
    workflow_id = submitted(api)
    answer = console("reviewer").post(
        f"/workflows/{workflow_id}/revise",
        {
            "open:title": "t",
            "open:body": "Floor 3",
            "note:ticket_id": value,
            "note:body": "Extinguisher on its way",
            "close:ticket_id": '{"$from": "open.result.id"}',
        },
    )
    assert answer.status_code == 400
    assert Workflow.objects.get(pk=workflow_id).revision == 1
