"""Reviewers decide; never on their own plans; never twice."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support import seeing
from tests.support.plans import ticket_plan
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
    response = api["reviewer"].post(
        "/workflows/00000000-0000-0000-0000-000000000000/approve", {"revision": 1, "plan_hash": "0" * 64}
    )
    assert response.status_code == 404


def test_a_plan_past_its_deadline_expires_instead_of_being_approved(api):
    from datetime import timedelta

    from django.utils import timezone

    from workflows.engine import expiry

    workflow_id = _submit(api)
    Workflow.objects.filter(pk=workflow_id).update(deadline=timezone.now() - timedelta(seconds=1))
    response = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    assert response.status_code == 409
    assert Workflow.objects.get(pk=workflow_id).status == "EXPIRED"
    assert not Approval.objects.filter(decision="APPROVE").exists()
    assert expiry.expire_overdue() == 0  # already done


def test_the_worker_sweep_expires_overdue_plans(api):
    from datetime import timedelta

    from django.utils import timezone

    from workflows.engine import expiry

    overdue, fresh = _submit(api), api["agent"].post("/workflows", ticket_plan("fresh")).json()["id"]
    Workflow.objects.filter(pk=overdue).update(deadline=timezone.now() - timedelta(seconds=1))
    assert expiry.expire_overdue() == 1
    assert Workflow.objects.get(pk=overdue).status == "EXPIRED"
    assert Workflow.objects.get(pk=fresh).status == "PLANNED"
    assert AuditEvent.objects.filter(workflow_id=overdue, verb="workflow.expired").exists()


def test_two_of_two_needs_two_distinct_reviewers(api):
    from workflows.engine import policy

    policy.update("ticket.create", by="admin", approvals_required=2)
    workflow_id = _submit(api)
    first = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "one"})
    assert first.status_code == 200 and first.json()["status"] == "PLANNED"
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {}).status_code == 409  # not twice
    second = api["reviewer2"].post(f"/workflows/{workflow_id}/approve", {"comment": "two"})
    assert second.json()["status"] == "APPROVED"
    assert AuditEvent.objects.filter(workflow_id=workflow_id, verb="workflow.approval_recorded").count() == 1


def test_an_approval_never_covers_another_plan(api):
    """Approvals are bound to the plan hash they reviewed."""
    from workflows.engine import policy

    policy.update("ticket.create", by="admin", approvals_required=2)
    workflow_id = _submit(api)
    api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    Approval.objects.filter(workflow_id=workflow_id).update(plan_hash="0" * 64)  # as if for another plan
    response = api["reviewer2"].post(f"/workflows/{workflow_id}/approve", {})
    assert response.json()["status"] == "PLANNED"  # the stale approval does not count


# The approval's request as the API serves it, its answer included: its
# token, the plan locked with its steps, the checks (policies, roles, team,
# persons, earlier approvals, delegations), the writes (the approval, the
# move and its audit event, the analytics rows, the step's due time, the
# wake-up) and the answer's read (docs/performance.md#r-client-path). On
# PostgreSQL one more: the announcement to waiters (the workers' NOTIFY
# rides on the statement that queues their wake-up).
APPROVE_QUERIES = {"sqlite": 24, "postgresql": 25}


def _approve_queries(api, key: str, steps: int) -> int:
    plan = {
        "name": f"{steps} noop steps",
        "submission_key": key,
        "steps": [{"key": f"s{n}", "action": "noop", "args": {"n": n}} for n in range(steps)],
    }
    workflow_id = api["agent"].post("/workflows", plan).json()["id"]
    path = f"/workflows/{workflow_id}/approve"
    body = seeing.json_body(path, {"comment": "counted"})
    reviewer = api["reviewer"].client
    assert reviewer.get("/api/v1/workflows?limit=1").status_code == 200  # the token's use is noted once a minute
    with CaptureQueriesContext(connection) as captured:
        response = reviewer.post(f"/api/v1{path}", body, content_type="application/json")
    assert response.status_code == 200 and response.json()["status"] == "APPROVED", response.content
    return len(captured)


def test_approving_reads_each_row_once_whatever_the_number_of_steps(api):
    """Nothing is read again that the approval already holds (its steps,
    its workflow's team and callback, the analytics row's key, a plan's
    revisions when it has none), and no read is repeated per step."""
    expected = APPROVE_QUERIES[connection.vendor]
    assert _approve_queries(api, "one-step", 1) == expected
    assert _approve_queries(api, "five-steps", 5) == expected
