"""Reviewers decide; never on their own plans; never twice."""

from tests.conftest import ticket_plan
from workflows.models import Approval, AuditEvent, Workflow


def _submit(api, who="agent"):
    return api[who].post("/workflows", ticket_plan()).json()["id"]


def test_reviewer_approves_a_plan(api):
    workflow_id = _submit(api)
    response = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "Looks right"})
    assert response.status_code == 200
    assert response.json()["status"] in ("APPROVED", "RUNNING", "COMPLETE")
    approval = Approval.objects.get(workflow_id=workflow_id)
    assert approval.reviewer.username == "reviewer"
    assert approval.plan_hash == Workflow.objects.get(pk=workflow_id).plan_hash
    assert AuditEvent.objects.filter(workflow_id=workflow_id, verb="workflow.approved", actor="reviewer").exists()


def test_submitter_cannot_approve_their_own_plan(api):
    workflow_id = _submit(api, who="admin")  # admin is a reviewer too
    response = api["admin"].post(f"/workflows/{workflow_id}/approve", {"comment": "mine"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert Workflow.objects.get(pk=workflow_id).status == "PLANNED"
    assert not Approval.objects.exists()


def test_only_reviewers_decide(api):
    workflow_id = _submit(api)
    for persona in ("operator", "auditor", "agent"):
        response = api[persona].post(f"/workflows/{workflow_id}/approve", {})
        assert response.status_code in (403, 404), persona
    assert Workflow.objects.get(pk=workflow_id).status == "PLANNED"


def test_deciding_twice_is_a_conflict(api):
    workflow_id = _submit(api)
    assert api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"}).status_code == 200
    again = api["reviewer2"].post(f"/workflows/{workflow_id}/approve", {})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert Workflow.objects.get(pk=workflow_id).status == "REJECTED"


def test_unknown_workflow_is_404(api):
    response = api["reviewer"].post("/workflows/00000000-0000-0000-0000-000000000000/approve", {})
    assert response.status_code == 404
