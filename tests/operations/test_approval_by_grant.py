"""Approval by standing grant (docs/explanation/policies.md#standing-grants):
a step the team's policies leave to a person only because no permit
approves it is approved at submission by a live grant of the agent that
holds on it, one use per operation key, counted with the submission; a
plan with one step no grant covers waits and uses nothing. The approval
and the proof name `grant:<id>` and its grantor; a revoked or expired
grant stops the next step."""

from datetime import UTC, datetime, timedelta

from django.test import Client
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.policy_sets import make_live, problems, run_one
from tests.support.running import run_until
from workflows.engine import bases, binding
from workflows.models import Approval, Attempt, AuditEvent, GrantUse, StandingGrant, Workflow
from workflows.states import StepStatus, WorkflowStatus

RESETS = 'resource.args has title && resource.args.title like "Reset*"'


def grant(api, **changes) -> dict:
    body = {
        "agent": "agent",
        "action": "ticket.create",
        "when": RESETS,
        "max_uses": 5,
        "until": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
        **changes,
    }
    answer = api["reviewer"].post("/grants", body)
    assert answer.status_code == 201, answer.content
    return answer.json()


def plan(key, *titles):
    return ticket_plan(
        key,
        steps=[
            {"key": f"s{n}", "action": "ticket.create", "args": {"title": title, "body": "b"}}
            for n, title in enumerate(titles)
        ],
    )


def submit(api, body, status=201):
    answer = api["agent"].post("/workflows", body)
    assert answer.status_code == status, answer.content
    return answer.json()


def uses(grant_id) -> int:
    return StandingGrant.objects.get(pk=grant_id).uses


def test_a_plan_a_grant_covers_runs_approved_by_it_naming_it_and_its_grantor(api, people, proof_desk):
    shown = grant(api)
    basis = shown["basis"]
    body = submit(api, plan("granted-1", "Reset password", "Reset token"))
    assert body["status"] == WorkflowStatus.APPROVED
    [approval] = Approval.objects.filter(workflow_id=body["id"])
    assert (approval.reviewer_id, approval.basis) == (None, basis) and binding.verifies(approval)
    # One use per operation key: both steps.
    assert uses(shown["id"]) == 2
    assert set(GrantUse.objects.values_list("operation_key", flat=True)) == {
        s.operation_key for s in Workflow.objects.get(pk=body["id"]).steps.all()
    }
    event = AuditEvent.objects.get(workflow_id=body["id"], verb="workflow.approved_by_grant")
    assert event.actor == basis and event.data["grantors"] == {basis: "reviewer"}
    assert event.data["bases"] == {"s0": basis, "s1": basis}
    verbs = list(AuditEvent.objects.filter(workflow_id=body["id"]).order_by("id").values_list("verb", flat=True))
    assert verbs[:4] == ["workflow.submitted", "grant.used", "grant.used", "workflow.approved_by_grant"]
    # The same submission again: the same workflow, no use counted twice.
    again = api["agent"].post("/workflows", plan("granted-1", "Reset password", "Reset token"))
    assert again.json()["id"] == body["id"] and uses(shown["id"]) == 2
    steps = api["reviewer"].get(f"/workflows/{body['id']}").json()["steps"]
    for step in steps:
        assert (step["approval"]["by"], step["approval"]["basis"], step["approval"]["grantor"]) == (
            "grant",
            basis,
            "reviewer",
        )
        assert step["approval"]["why"].startswith(f"approved by standing grant {shown['id']}, granted by reviewer")
    # The page says the same, and names the approval by its basis.
    client = Client()
    client.login(username="reviewer", password=PASSWORD)
    page = client.get(f"/workflows/{body['id']}/").content.decode()
    assert f"Approved by a standing grant</strong>: approved by standing grant {shown['id']}" in page
    assert f'by standing grant <code data-testid="approval-basis">{basis}</code>' in page
    run_until(body["id"], WorkflowStatus.COMPLETE)
    grantor = str(people["reviewer"].pk)
    for attempt in Attempt.objects.filter(step__workflow_id=body["id"]):
        assert [(a["sub"], a["grantor"]) for a in attempt.proof_approvers] == [(basis, grantor)]
    # The desk verified each proof and keeps whom it names: the grant and its grantor.
    assert [entry["proof"]["approvers"][0]["grantor"] for entry in proof_desk.ledger()] == [grantor, grantor]
    # Counted with the approvals no person made.
    outcomes = api["reviewer"].get("/analytics/decisions").json()["outcomes"]
    assert (outcomes["approved"], outcomes["auto"], outcomes["human"]) == (1, 1, 0)


def test_a_plan_with_one_step_no_grant_covers_waits_and_uses_nothing(api):
    shown = grant(api)
    body = submit(api, plan("partly", "Reset password", "Printer on fire"))
    assert body["status"] == WorkflowStatus.PLANNED
    assert uses(shown["id"]) == 0 and not GrantUse.objects.exists()
    assert not AuditEvent.objects.filter(verb="grant.used").exists()
    assert not Approval.objects.filter(workflow_id=body["id"]).exists()
    assert {s["approval"]["by"] for s in body["steps"]} == {"human"}


def test_the_last_use_taken_the_next_plan_waits_for_a_person(api):
    shown = grant(api, max_uses=1)
    first = submit(api, plan("first", "Reset one"))
    assert first["status"] == WorkflowStatus.APPROVED
    second = submit(api, plan("second", "Reset two"))
    assert second["status"] == WorkflowStatus.PLANNED
    exhausted = StandingGrant.objects.get(pk=shown["id"])
    assert (exhausted.status, exhausted.uses) == ("EXHAUSTED", 1)
    # Used up, it still backs what it approved.
    assert bases.live(shown["basis"])


def test_policy_and_grant_approve_a_plan_together_and_a_revoked_grant_stops_its_next_step(api, desk):
    make_live(
        api,
        '@id("known")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'when { resource.args has title && resource.args.title == "Known" };\n',
    )
    shown = grant(api)
    body = submit(api, plan("together", "Known", "Reset password"))
    assert body["status"] == WorkflowStatus.APPROVED
    approvals = Approval.objects.filter(workflow_id=body["id"])
    assert sorted(a.basis for a in approvals) == sorted(["policy:default:known@1", shown["basis"]])
    assert all(a.reviewer_id is None and binding.verifies(a) for a in approvals)
    by = {s["key"]: (s["approval"]["by"], s["approval"]["basis"]) for s in body["steps"]}
    assert by == {"s0": ("policy", "policy:default:known@1"), "s1": ("grant", shown["basis"])}
    assert uses(shown["id"]) == 1
    first = run_one(body["id"])
    assert first.status == StepStatus.COMPLETE
    attempt = Attempt.objects.get(step=first)
    assert {a["sub"] for a in attempt.proof_approvers} == {"policy:default:known@1", shown["basis"]}
    revoked = api["operator"].delete(f"/grants/{shown['id']}", {"reason": "agent misbehaves"})
    assert revoked.status_code == 200, revoked.content
    blocked = run_one(body["id"])
    assert (blocked.status, blocked.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert f"standing grant {shown['id']} is REVOKED" in problems(body["id"])
    assert len(desk.tickets()) == 1  # the second effect never left


def test_a_grant_past_its_time_stops_the_next_step_until_a_person_approves(api, people, desk):
    shown = grant(api)
    body = submit(api, plan("lapsing", "Reset one", "Reset two"))
    assert run_one(body["id"]).status == StepStatus.COMPLETE
    now = timezone.now()
    StandingGrant.objects.filter(pk=shown["id"]).update(created_at=now - timedelta(days=1), until=now)
    assert not bases.live(shown["basis"])
    blocked = run_one(body["id"])
    assert (blocked.status, blocked.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert f"standing grant {shown['id']} ended at" in problems(body["id"])
    assert len(desk.tickets()) == 1
    # A person's fresh approval lets it go on, the person in its proof.
    decide.approve(Workflow.objects.get(pk=body["id"]), by=people["reviewer2"])
    run_until(body["id"], WorkflowStatus.COMPLETE)
    attempt = Attempt.objects.get(step__workflow_id=body["id"], step__key="s1")
    assert [a["sub"] for a in attempt.proof_approvers] == [str(people["reviewer2"].pk)]


def test_a_forbid_or_a_policy_asking_people_wins_over_a_grant(api):
    shown = grant(api)
    permit_submit = '@id("submits")\npermit(principal, action == Action::"submit", resource);\n'
    make_live(api, '@id("no-resets")\nforbid(principal, action == Action::"submit", resource);\n' + permit_submit)
    refused = api["agent"].post("/workflows", plan("forbidden", "Reset password"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "policy_forbidden"
    never_auto = '@id("never-auto")\nforbid(principal, action == Action::"auto_approve", resource);\n'
    make_live(api, never_auto + permit_submit)
    waiting = submit(api, plan("auto-forbidden", "Reset password"))
    assert waiting["status"] == WorkflowStatus.PLANNED
    assert waiting["steps"][0]["approval"]["reason"] == "auto_forbidden"
    make_live(api, '@id("two")\n@approvals("2")\npermit(principal, action == Action::"submit", resource);\n')
    asking = submit(api, plan("annotated", "Reset password"))
    assert asking["status"] == WorkflowStatus.PLANNED
    assert uses(shown["id"]) == 0 and not GrantUse.objects.exists()


def test_a_step_whose_args_the_policies_cannot_judge_is_not_granted(api):
    shown = grant(api, when="true")
    make_live(
        api,
        '@id("not-prod")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'unless { resource.args has title && resource.args.title like "*prod*" };\n',
    )
    body = submit(
        api,
        ticket_plan(
            "referenced",
            steps=[
                {"key": "open", "action": "ticket.create", "args": {"title": "x", "body": "b"}},
                {"key": "again", "action": "ticket.create", "args": {"title": {"$from": "open.result.title"}}},
            ],
        ),
    )
    assert body["status"] == WorkflowStatus.PLANNED
    assert body["steps"][1]["approval"]["reason"] == "reference"
    assert uses(shown["id"]) == 0
