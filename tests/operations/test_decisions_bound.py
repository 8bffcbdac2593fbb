"""Every decision names what its decider saw, and four eyes count people.

A decision carries the revision and plan hash it decides on (and the
preview and results digests where there are any): one left out is a 400
naming it, one no longer current a 409 `stale_revision` naming what is, and
in both cases nothing is recorded. The plan's authors (its submitter, the
owner of the agent that submitted it, the editor of any revision) never
approve it or its gates, and accounts linked as one person count once.
"""

import pytest
from django.core.management import call_command
from django.test import Client as PlainClient
from django.urls import reverse

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from workflows.engine import policy
from workflows.errors import NotAllowed
from workflows.models import Approval, Compensation, GateApproval, Workflow
from workflows.operations import approvals, plans
from workflows.operations.deciding import Seen, SeenMissing

NOOP = {
    "name": "Two noops",
    "submission_key": "noop-1",
    "steps": [{"key": "a", "action": "noop", "args": {"n": 1}}, {"key": "b", "action": "noop", "args": {"n": 2}}],
}


def submitted(api, plan=NOOP) -> dict:
    answer = api["agent"].post("/workflows", plan)
    assert answer.status_code == 201, answer.content
    return answer.json()


def raw_post(persona_api, path, body):
    """A decision exactly as sent: no field filled in from a read."""
    return persona_api.client.post(f"/api/v1{path}", body, content_type="application/json")


@pytest.mark.parametrize(
    "body, missing",
    [
        ({"comment": "ok"}, {"revision", "plan_hash"}),
        ({"revision": 1}, {"plan_hash"}),
        ({"plan_hash": "a" * 64}, {"revision"}),
    ],
)
@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_decision_that_does_not_name_what_it_saw_is_400_naming_the_fields(api, body, missing, verb):
    plan = submitted(api)
    answer = raw_post(api["reviewer"], f"/workflows/{plan['id']}/{verb}", body)
    assert answer.status_code == 400
    assert set(answer.json()["error"]["fields"]) == missing
    assert not Approval.objects.exists() and Workflow.objects.get(pk=plan["id"]).status == "PLANNED"


def test_a_decision_on_an_earlier_revision_is_409_with_the_current_one_and_records_nothing(api):
    plan = submitted(api)
    edited = api["reviewer"].post(
        f"/workflows/{plan['id']}/revise", {"steps": [{"key": "a", "args": {"n": 99}}], "revision": 1}
    )
    assert edited.status_code == 200, edited.content
    current = edited.json()
    for verb, more in (("approve", {"preview_digests": {}}), ("reject", {})):
        answer = raw_post(
            api["reviewer2"], f"/workflows/{plan['id']}/{verb}", {"revision": 1, "plan_hash": plan["plan_hash"], **more}
        )
        assert answer.status_code == 409
        error = answer.json()["error"]
        assert error["code"] == "stale_revision"
        assert error["current"] == {"revision": 2, "plan_hash": current["plan_hash"]}
    assert not Approval.objects.exists() and Workflow.objects.get(pk=plan["id"]).status == "PLANNED"


def test_the_current_revision_with_another_plan_hash_is_409(api):
    plan = submitted(api)
    answer = raw_post(
        api["reviewer"],
        f"/workflows/{plan['id']}/approve",
        {"revision": 1, "plan_hash": "f" * 64, "preview_digests": {}},
    )
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "stale_revision"
    assert not Approval.objects.exists()


def test_the_previews_are_named_when_the_plan_has_previews(api, people):
    plan = submitted(api, ticket_plan("previewed"))
    workflow = Workflow.objects.get(pk=plan["id"])
    workflow.steps.update(preview_state="READY", preview_digest="d" * 64, preview={"summary": "s", "details": {}})
    shown = {"open": "d" * 64, "note": "d" * 64, "close": "d" * 64}
    answer = raw_post(
        api["reviewer"], f"/workflows/{plan['id']}/approve", {"revision": 1, "plan_hash": plan["plan_hash"]}
    )
    assert answer.status_code == 400 and set(answer.json()["error"]["fields"]) == {"preview_digests"}
    shown_none = raw_post(
        api["reviewer"],
        f"/workflows/{plan['id']}/approve",
        {"revision": 1, "plan_hash": plan["plan_hash"], "preview_digests": {}},
    )
    assert shown_none.status_code == 409 and shown_none.json()["error"]["code"] == "preview_changed"
    assert not Approval.objects.exists()
    seen = raw_post(
        api["reviewer"],
        f"/workflows/{plan['id']}/approve",
        {"revision": 1, "plan_hash": plan["plan_hash"], "preview_digests": shown},
    )
    assert seen.status_code == 200, seen.content


def test_a_revision_names_the_revision_it_edits(api):
    plan = submitted(api)
    edit = {"steps": [{"key": "a", "args": {"n": 5}}]}
    missing = raw_post(api["reviewer"], f"/workflows/{plan['id']}/revise", edit)
    assert missing.status_code == 400 and "revision" in missing.json()["error"]["fields"]
    first = raw_post(api["reviewer"], f"/workflows/{plan['id']}/revise", {**edit, "revision": 1})
    assert first.status_code == 200 and first.json()["revision"] == 2
    # A second editor who also read revision 1 does not overwrite the first edit.
    second = raw_post(
        api["reviewer2"], f"/workflows/{plan['id']}/revise", {"steps": [{"key": "a", "args": {"n": 6}}], "revision": 1}
    )
    assert second.status_code == 409
    assert second.json()["error"]["current"]["revision"] == 2
    assert Workflow.objects.get(pk=plan["id"]).plan[0]["args"] == {"n": 5}


def test_the_schema_documents_what_a_decision_names(api):
    schema = api["reviewer"].get("/openapi.json").json()["components"]["schemas"]
    assert {"revision", "plan_hash"} <= set(schema["ApprovalIn"]["required"])
    assert {"revision", "plan_hash"} <= set(schema["DecisionIn"]["required"])
    assert "preview_digests" in schema["ApprovalIn"]["properties"]
    assert "results_digest" in schema["GateDecisionIn"]["properties"]
    assert "plan_hash" in schema["CompensationDecisionIn"]["required"]
    assert "revision" in schema["ReviseIn"]["required"]


# --- four eyes by person --------------------------------------------------------


def test_the_owner_of_an_agent_cannot_approve_its_plans(api, people):
    call_command("issue_token", "agent", "--owner", "reviewer")
    plan = submitted(api)
    refused = api["reviewer"].post(f"/workflows/{plan['id']}/approve", {})
    assert refused.status_code == 403 and "owns the agent" in refused.json()["error"]["message"]
    assert api["reviewer2"].post(f"/workflows/{plan['id']}/approve", {}).status_code == 200


def test_two_accounts_of_one_person_count_once(api, people):
    policy.update("noop", by="admin", approvals_required=2)
    call_command("person", "link", "reviewer", "reviewer2")
    plan = submitted(api)
    assert api["reviewer"].post(f"/workflows/{plan['id']}/approve", {}).json()["status"] == "PLANNED"
    again = api["reviewer2"].post(f"/workflows/{plan['id']}/approve", {})
    assert again.status_code == 409 and "people, not accounts" in again.json()["error"]["message"]
    assert Approval.objects.count() == 1
    assert api["admin"].post(f"/workflows/{plan['id']}/approve", {}).json()["status"] == "APPROVED"


def test_approvals_recorded_before_a_link_count_once_after_it(people):
    policy.update("noop", by="admin", approvals_required=3)
    workflow = plans.submit(people["agent"], NOOP).workflow
    decide.approve(workflow, by=people["reviewer"])
    decide.approve(workflow, by=people["reviewer2"])
    rules = list(policy.policies_for({"noop"}).values())
    assert len(policy.valid_approvals(workflow, rules)) == 2
    call_command("person", "link", "reviewer", "reviewer2")
    assert len(policy.valid_approvals(workflow, rules)) == 1


def test_an_editor_of_any_revision_never_approves_the_plan(api, people):
    plan = submitted(api)
    assert (
        decide.revise(
            Workflow.objects.get(pk=plan["id"]), by=people["reviewer"], steps=[{"key": "a", "args": {"n": 2}}]
        ).revision
        == 2
    )
    decide.revise(Workflow.objects.get(pk=plan["id"]), by=people["admin"], steps=[{"key": "a", "args": {"n": 3}}])
    refused = api["reviewer"].post(f"/workflows/{plan['id']}/approve", {})
    assert refused.status_code == 403 and "co-author" in refused.json()["error"]["message"]
    assert api["reviewer2"].post(f"/workflows/{plan['id']}/approve", {}).status_code == 200


def test_only_a_reviewer_eligible_to_approve_may_revise(api, people):
    policy.update("noop", by="admin", reviewer_group="noop-approvers")
    plan = submitted(api)
    answer = api["reviewer"].post(f"/workflows/{plan['id']}/revise", {"steps": [{"key": "a", "args": {"n": 2}}]})
    assert answer.status_code == 403 and "noop-approvers" in answer.json()["error"]["message"]
    assert Workflow.objects.get(pk=plan["id"]).revision == 1


GATED = {
    "name": "Open a ticket, then close it once a person looked",
    "submission_key": "gated-1",
    "steps": [
        {"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire"}},
        {
            "key": "close",
            "action": "ticket.close",
            "args": {"ticket_id": {"$from": "open.result.id"}},
            "gate": {"approvals": 1, "note": "Look first"},
        },
    ],
}


def test_an_editor_never_approves_a_gate_of_the_plan(people, desk):
    workflow = plans.submit(people["agent"], GATED).workflow
    decide.revise(workflow, by=people["reviewer"], steps=[{"key": "open", "args": {"title": "Printer on fire!"}}])
    decide.approve(workflow, by=people["reviewer2"])
    run_until(workflow.pk, "WAITING_GATE")
    with pytest.raises(NotAllowed, match="co-author"):
        decide.gate_approve(workflow, "close", by=people["reviewer"])
    assert not GateApproval.objects.exists()


def test_a_compensation_names_its_plan_hash_and_its_requester_never_authorizes_it(api, people, desk):
    workflow = decide.approve(plans.submit(people["agent"], ticket_plan("undo-me")).workflow, by=people["reviewer"])
    run_until(workflow.pk, "COMPLETE")
    call_command("person", "link", "operator", "reviewer2")  # the operator's reviewer account
    requested = api["operator"].post(f"/workflows/{workflow.pk}/compensations", {"reason": "wrong floor"})
    assert requested.status_code == 201, requested.content
    comp = requested.json()
    assert len(comp["plan_hash"]) == 64
    missing = raw_post(api["reviewer"], f"/compensations/{comp['id']}/authorize", {"reason": ""})
    assert missing.status_code == 400 and set(missing.json()["error"]["fields"]) == {"plan_hash"}
    stale = raw_post(api["reviewer"], f"/compensations/{comp['id']}/authorize", {"plan_hash": "e" * 64})
    assert stale.status_code == 409 and stale.json()["error"]["current"] == {"plan_hash": comp["plan_hash"]}
    own = raw_post(api["reviewer2"], f"/compensations/{comp['id']}/authorize", {"plan_hash": comp["plan_hash"]})
    assert own.status_code == 403 and "requested it" in own.json()["error"]["message"]
    assert Compensation.objects.get(pk=comp["id"]).status == "REQUESTED"
    done = raw_post(api["reviewer"], f"/compensations/{comp['id']}/authorize", {"plan_hash": comp["plan_hash"]})
    assert done.status_code == 200, done.content


# --- the console ----------------------------------------------------------------


def signed_in(name):
    client = PlainClient()
    assert client.login(username=name, password=PASSWORD)
    return client


def test_a_stale_pages_approve_shows_what_changed_and_approves_nothing(people):
    workflow = plans.submit(people["agent"], NOOP).workflow
    page = signed_in("reviewer2")
    detail = page.get(reverse("workflow_detail", args=[workflow.pk])).content.decode()
    assert 'name="revision" value="1"' in detail and f'name="plan_hash" value="{workflow.plan_hash}"' in detail
    decide.revise(workflow, by=people["reviewer"], steps=[{"key": "b", "args": {"n": 20}}])
    answer = page.post(
        reverse("workflow_approve", args=[workflow.pk]),
        {"revision": "1", "plan_hash": workflow.plan_hash, "previews_shown": "1"},
        follow=True,
    )
    body = answer.content.decode()
    assert answer.redirect_chain[-1][0].endswith(f"/workflows/{workflow.pk}/changed?seen=1")
    assert 'data-testid="changes"' in body and "20" in body
    assert "Approve revision 2" in body and 'name="revision" value="2"' in body
    assert not Approval.objects.exists()
    fresh = Workflow.objects.get(pk=workflow.pk)
    again = page.post(
        reverse("workflow_approve", args=[workflow.pk]),
        {"revision": "2", "plan_hash": fresh.plan_hash, "previews_shown": "1"},
    )
    assert again.status_code == 302 and Workflow.objects.get(pk=workflow.pk).status == "APPROVED"


def test_a_console_decision_without_the_revision_is_refused(people):
    workflow = plans.submit(people["agent"], NOOP).workflow
    answer = signed_in("reviewer").post(
        reverse("workflow_approve", args=[workflow.pk]), {"previews_shown": "1"}, follow=True
    )
    assert "revision, plan_hash missing" in answer.content.decode()
    assert not Approval.objects.exists()


def test_operations_refuse_a_decision_without_a_seen_plan(people):
    workflow = plans.submit(people["agent"], NOOP).workflow
    with pytest.raises(SeenMissing) as refused:
        approvals.approve(workflow, by=people["reviewer"], seen=Seen())
    assert set(refused.value.fields) == {"revision", "plan_hash"}
    assert not Approval.objects.exists()


def test_the_page_says_what_changed_since_the_reviewer_last_looked(people):
    workflow = plans.submit(people["agent"], NOOP).workflow
    page = signed_in("reviewer2")
    assert (
        'data-testid="changed-since"' not in page.get(reverse("workflow_detail", args=[workflow.pk])).content.decode()
    )
    decide.revise(workflow, by=people["reviewer"], steps=[{"key": "a", "args": {"n": 11}}])
    decide.revise(workflow, by=people["admin"], steps=[{"key": "b", "args": {"n": 22}}])
    body = page.get(reverse("workflow_detail", args=[workflow.pk])).content.decode()
    assert "Changed since you last looked (revision 1): now revision 3" in body
    assert "11" in body and "22" in body  # both edits, not only the latest
    again = page.get(reverse("workflow_detail", args=[workflow.pk])).content.decode()
    assert "you last looked" not in again and "Changed since revision 2: now revision 3" in again


@pytest.mark.parametrize("seen", ["abc", "-1", "0", "9" * 30, "1.5", ""])
def test_the_changed_page_reads_any_seen_revision_without_a_server_error(people, seen):
    workflow = plans.submit(people["agent"], NOOP).workflow
    answer = signed_in("reviewer").get(reverse("workflow_changed", args=[workflow.pk]), {"seen": seen})
    assert answer.status_code == 200
    assert 'name="revision" value="1"' in answer.content.decode()


@pytest.mark.parametrize("revision", ["abc", "-1", "1.0", "9" * 30])
def test_a_console_decision_with_a_malformed_revision_records_nothing(people, revision):
    workflow = plans.submit(people["agent"], NOOP).workflow
    answer = signed_in("reviewer").post(
        reverse("workflow_approve", args=[workflow.pk]),
        {"revision": revision, "plan_hash": workflow.plan_hash, "previews_shown": "1"},
        follow=True,
    )
    assert answer.status_code == 200 and "revision missing" in answer.content.decode()
    assert not Approval.objects.exists()
