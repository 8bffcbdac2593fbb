"""What a team's policies ask of people (docs/explanation/policies.md#annotations):
a deciding permit's `@approvals("N")` and `@reviewer_group("G")` raise what
the plan's approvals must be, at the decision, in the recheck before each
effect, in whom its notices go to, and again when a reviewer edits it."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.policy_sets import make_live, problems, run_one
from workflows import roles
from workflows.errors import NotAllowed
from workflows.models import ActionPolicy, Approval, StandingGrant, Workflow
from workflows.operations import notifications
from workflows.policy.evaluation import PolicyForbidden
from workflows.states import StepStatus, WorkflowStatus

TWO_FOR_BIG = (
    '@id("two-for-big")\n@approvals("2")\npermit(principal, action == Action::"submit", resource)\n'
    'when { resource.action == "ticket.create" && resource.args has title && resource.args.title like "*big*" };\n'
)
FINANCE = (
    '@id("finance-only")\n@reviewer_group("finance")\npermit(principal, action == Action::"submit", resource)\n'
    'when { resource.action == "ticket.create" };\n'
)
NO_FORBIDDEN = (
    '@id("no-forbidden")\nforbid(principal, action == Action::"submit", resource)\n'
    'when { resource.args has title && resource.args.title like "*forbidden*" };\n'
)


def opening(key, title):
    return ticket_plan(key, steps=[{"key": "open", "action": "ticket.create", "args": {"title": title}}])


def submit(api, plan):
    answer = api["agent"].post("/workflows", plan)
    assert answer.status_code == 201, answer.content
    return answer.json()


def reviewer(name, *groups):
    user = User.objects.create_user(name, password=PASSWORD)
    user.groups.add(*(Group.objects.get_or_create(name=g)[0] for g in (roles.REVIEWERS, *groups)))
    return user


def test_approvals_asked_by_a_permit_are_what_the_plan_needs(api, people, desk):
    make_live(api, TWO_FOR_BIG)
    body = submit(api, opening("big-1", "a big change"))
    assert body["status"] == WorkflowStatus.PLANNED
    asked = body["steps"][0]["approval"]
    # No permit approves it without a person; the one that decided asks for two.
    assert (asked["by"], asked["reason"], asked["approvals"], asked["policies"]) == (
        "human",
        "no_permit",
        2,
        ["two-for-big"],
    )
    workflow = Workflow.objects.get(pk=body["id"])
    assert workflow.policy_asks == {"approvals": 2, "groups": [], "policies": ["two-for-big"], "steps": ["open"]}
    # The action policy asks for one: the permit's two win.
    decide.approve(workflow, by=people["reviewer"])
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.PLANNED
    client = Client()
    client.login(username="reviewer2", password=PASSWORD)
    page = client.get(f"/workflows/{body['id']}/").content.decode()
    assert "it asks for 2 approvals" in page
    decide.approve(Workflow.objects.get(pk=body["id"]), by=people["reviewer2"])
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.APPROVED
    # The recheck before the effect counts against the same two: one of the
    # approvers is no longer a reviewer, and the step does not run.
    people["reviewer2"].groups.remove(Group.objects.get(name=roles.REVIEWERS))
    step = run_one(body["id"])
    assert (step.status, step.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert "1 of 2 required" in problems(body["id"])
    assert desk.tickets() == []


def test_a_plan_the_permit_does_not_ask_about_needs_what_its_actions_say(api, people):
    make_live(api, TWO_FOR_BIG)
    body = submit(api, opening("small-1", "a small change"))
    assert Workflow.objects.get(pk=body["id"]).policy_asks is None
    decide.approve(Workflow.objects.get(pk=body["id"]), by=people["reviewer"])
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.APPROVED


def test_a_group_asked_by_a_permit_decides_who_may_approve(api, people, desk):
    make_live(api, FINANCE)
    body = submit(api, opening("finance-1", "pay"))
    assert body["steps"][0]["approval"]["groups"] == ["finance"]
    workflow = Workflow.objects.get(pk=body["id"])
    with pytest.raises(NotAllowed, match="policy finance-only needs a member of finance"):
        decide.approve(workflow, by=people["reviewer"])
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.PLANNED
    payer = reviewer("payer", "finance")
    # Its notices go to the group's reviewers alone.
    assert list(notifications.reviewers_for(workflow)) == [payer]
    decide.approve(workflow, by=payer)
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.APPROVED
    # Out of the group before the effect: the approval no longer counts.
    payer.groups.remove(Group.objects.get(name="finance"))
    step = run_one(body["id"])
    assert (step.status, step.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert "still in finance" in problems(body["id"])
    assert desk.tickets() == []


def test_an_edit_is_judged_again_by_the_teams_policies(api, people):
    make_live(api, TWO_FOR_BIG + NO_FORBIDDEN)
    body = submit(api, opening("edited-1", "a small change"))
    workflow = Workflow.objects.get(pk=body["id"])
    assert workflow.policy_asks is None
    # An edit into what the policies forbid is refused, and nothing changes.
    with pytest.raises(PolicyForbidden, match="no-forbidden"):
        decide.revise(workflow, by=people["reviewer"], steps=[{"key": "open", "args": {"title": "forbidden"}}])
    assert Workflow.objects.get(pk=body["id"]).revision == 1
    # An edit into what asks for two approvals asks for them.
    decide.revise(workflow, by=people["reviewer"], steps=[{"key": "open", "args": {"title": "a big change"}}])
    workflow = Workflow.objects.get(pk=body["id"])
    assert (workflow.revision, workflow.policy_asks["approvals"]) == (2, 2)
    step = api["reviewer2"].get(f"/workflows/{body['id']}").json()["steps"][0]["approval"]
    assert (step["by"], step["approvals"], step["policies"]) == ("human", 2, ["two-for-big"])
    decide.approve(workflow, by=people["reviewer2"])
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.PLANNED
    decide.approve(Workflow.objects.get(pk=body["id"]), by=reviewer("third"))
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.APPROVED


def test_an_edit_that_the_policies_would_approve_still_waits_for_people(api, people):
    make_live(
        api,
        '@id("reads")\npermit(principal, action == Action::"auto_approve", resource)\n'
        + ('when { resource.args has title && resource.args.title like "*read*" };\n'),
    )
    body = submit(api, opening("edited-2", "change"))
    workflow = Workflow.objects.get(pk=body["id"])
    decide.revise(workflow, by=people["reviewer"], steps=[{"key": "open", "args": {"title": "read only"}}])
    workflow = Workflow.objects.get(pk=body["id"])
    assert workflow.status == WorkflowStatus.PLANNED
    step = workflow.steps.get(key="open")
    assert (step.policy_decision["by"], step.policy_decision["decision"]) == ("human", "auto")
    assert "edited in review" in step.policy_decision["why"]


READS = (
    '@id("reads")\npermit(principal, action == Action::"auto_approve", resource)\n'
    'when { resource.action == "ticket.create" };\n'
)


def asks_two(action="ticket.create"):
    ActionPolicy.objects.update_or_create(action=action, defaults={"approvals_required": 2})


def test_no_approval_without_a_person_where_the_action_policy_asks_for_two(api, people):
    make_live(api, READS)
    asks_two()
    answer = (
        api["agent"]
        .post("/policies/evaluate", {"agent": "agent", "plan": {"steps": opening("x", "t")["steps"]}})
        .json()
    )
    assert (answer["basis"], answer["steps"][0]["decision"], answer["steps"][0]["reason"]) == (
        None,
        "human",
        "action_policy",
    )
    body = submit(api, opening("two-by-action", "t"))
    assert body["status"] == WorkflowStatus.PLANNED
    assert not Approval.objects.filter(workflow_id=body["id"]).exists()
    assert "its action's policy asks people for it" in body["steps"][0]["approval"]["why"]
    # Nor by a standing grant: it would stand for one approval of two.
    granted = api["reviewer"].post(
        "/grants",
        {
            "agent": "agent",
            "action": "ticket.create",
            "when": "true",
            "max_uses": 5,
            "until": (timezone.now() + timedelta(days=1)).isoformat(),
        },
    )
    assert granted.status_code == 201, granted.content
    body = submit(api, opening("two-by-action-granted", "t"))
    assert body["status"] == WorkflowStatus.PLANNED
    assert StandingGrant.objects.get(pk=granted.json()["id"]).uses == 0


def test_an_approval_by_policy_stops_counting_once_the_action_asks_for_more(api, people, desk):
    make_live(api, READS)
    body = submit(api, opening("raised", "t"))
    assert body["status"] == WorkflowStatus.APPROVED
    asks_two()
    step = run_one(body["id"])
    assert (step.status, step.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert "stands for one approval of any reviewer" in problems(body["id"])
    assert desk.tickets() == []
