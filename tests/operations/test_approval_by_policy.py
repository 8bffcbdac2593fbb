"""Approval by policy (docs/explanation/policies.md#approval-by-policy): a
plan every step of which the team's live Cedar set permits `auto_approve`
is approved at submission with no person, naming its basis, which the
approval proof carries and the recheck before each attempt keeps live; each
step says why it ran without a person or why it needed one."""

from django.test import Client

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.policy_sets import make_live, problems, run_one
from tests.support.running import run_until
from workflows.engine import bases, binding
from workflows.models import Approval, Attempt, AuditEvent, Workflow
from workflows.states import StepStatus, WorkflowStatus

READS = (
    '@id("reads")\npermit(principal, action == Action::"auto_approve", resource)\n'
    'when { resource.action == "ticket.create" };\n'
)
BASIS = "policy:default:reads@1"


def opening(key, steps=("open",)):
    return ticket_plan(
        key, steps=[{"key": step, "action": "ticket.create", "args": {"title": f"t {step}"}} for step in steps]
    )


def submit(api, plan):
    answer = api["agent"].post("/workflows", plan)
    assert answer.status_code == 201, answer.content
    return answer.json()


def test_an_auto_approved_plan_runs_with_its_basis_recorded_and_in_its_proof(api, proof_desk):
    make_live(api, READS)
    body = submit(api, opening("auto-1"))
    assert body["status"] == WorkflowStatus.APPROVED
    [approval] = Approval.objects.filter(workflow_id=body["id"])
    assert (approval.reviewer_id, approval.basis, approval.decision) == (None, BASIS, "APPROVE")
    assert binding.verifies(approval)
    event = AuditEvent.objects.get(workflow_id=body["id"], verb="workflow.approved_by_policy")
    assert (event.actor, event.data["basis"]) == ("policy:default@1", BASIS)
    assert event.data["policies"] == {"open": ["reads"]}
    assert not AuditEvent.objects.filter(workflow_id=body["id"], verb="workflow.approved").exists()
    run_until(body["id"], WorkflowStatus.COMPLETE)
    attempt = Attempt.objects.get(step__workflow_id=body["id"])
    assert [a["sub"] for a in attempt.proof_approvers] == [BASIS]
    # The desk verified the proof and keeps who approved: the basis.
    [entry] = proof_desk.ledger()
    assert entry["proof"]["approvers"] == attempt.proof_approvers and entry["proof"]["wf"] == body["id"]
    step = api["reviewer"].get(f"/workflows/{body['id']}").json()["steps"][0]
    assert step["approval"]["by"] == "policy" and step["approval"]["basis"] == BASIS
    assert (step["approval"]["reason"], step["approval"]["policies"], step["approval"]["version"]) == (
        "permitted",
        ["reads"],
        1,
    )
    assert "reads" in step["approval"]["why"]


def test_several_permits_name_one_deterministic_basis(api):
    make_live(
        api,
        READS + '@id("also")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'when { resource.action == "ticket.create" };\n'
        '@id("bare")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'when { resource.action == "noop" };\n',
    )
    plan = ticket_plan(
        "auto-many",
        steps=[
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
            {"key": "nothing", "action": "noop", "args": {}},
        ],
    )
    body = submit(api, plan)
    assert Approval.objects.get(workflow_id=body["id"]).basis == "policy:default:also,bare,reads@1"
    assert bases.parse_policy("policy:default:also,bare,reads@1") == ("default", ["also", "bare", "reads"], 1)


def test_a_plan_with_one_human_step_waits_and_each_step_says_why(api, people):
    make_live(api, READS)
    body = submit(api, ticket_plan("mixed"))
    assert body["status"] == WorkflowStatus.PLANNED
    assert not Approval.objects.filter(workflow_id=body["id"]).exists()
    steps = {s["key"]: s["approval"] for s in api["reviewer"].get(f"/workflows/{body['id']}").json()["steps"]}
    assert {s["by"] for s in steps.values()} == {"human"}
    assert (steps["open"]["decision"], steps["open"]["reason"]) == ("auto", "permitted")
    assert "waits for a person" in steps["open"]["why"] and "note, close" in steps["open"]["why"]
    assert (steps["note"]["reason"], steps["close"]["reason"]) == ("no_permit", "no_permit")
    assert steps["note"]["why"] == "no policy permits auto_approve for it"
    # The page says the same, as decided at submission.
    client = Client()
    client.login(username="reviewer", password=PASSWORD)
    page = client.get(f"/workflows/{body['id']}/").content.decode()
    assert "A person approves</strong>: no policy permits auto_approve for it" in page
    # A person's approval still runs it as before.
    decide.approve(Workflow.objects.get(pk=body["id"]), by=people["reviewer"])
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.APPROVED


def test_a_destructive_step_waits_unless_the_permit_allows_destructive(api):
    closing = {"key": "close", "action": "ticket.close", "args": {"ticket_id": 1}}
    permit = (
        'permit(principal, action == Action::"auto_approve", resource)\nwhen { resource.action == "ticket.close" };\n'
    )
    make_live(api, '@id("closes")\n' + permit)
    body = submit(api, ticket_plan("close-1", steps=[closing]))
    assert body["status"] == WorkflowStatus.PLANNED
    assert body["steps"][0]["approval"]["reason"] == "destructive"
    assert "@allow_destructive" in body["steps"][0]["approval"]["why"]
    make_live(api, '@id("closes")\n@allow_destructive("true")\n' + permit)
    body = submit(api, ticket_plan("close-2", steps=[closing]))
    assert body["status"] == WorkflowStatus.APPROVED
    assert body["steps"][0]["approval"]["basis"] == "policy:default:closes@2"


def test_an_annotation_asking_people_sends_the_step_to_them(api):
    make_live(api, '@id("reads")\n@reviewer_group("ops")\n' + READS.split("\n", 1)[1])
    body = submit(api, opening("annotated"))
    assert body["status"] == WorkflowStatus.PLANNED
    assert (body["steps"][0]["approval"]["reason"], body["steps"][0]["approval"]["policies"]) == (
        "annotation",
        ["reads"],
    )


def test_a_reference_in_a_condition_sends_the_step_to_a_person(api):
    make_live(
        api,
        '@id("not-prod")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'unless { resource.args has title && resource.args.title like "*prod*" };\n',
    )
    plan = ticket_plan(
        "ref-1",
        steps=[
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
            {"key": "again", "action": "ticket.create", "args": {"title": {"$from": "open.result.title"}}},
        ],
    )
    body = submit(api, plan)
    assert body["status"] == WorkflowStatus.PLANNED
    assert body["steps"][1]["approval"]["reason"] == "reference"


def test_a_superseded_version_blocks_the_next_step_until_a_person_approves(api, people, desk):
    make_live(api, READS)
    body = submit(api, opening("superseded", steps=("open", "again")))
    assert body["status"] == WorkflowStatus.APPROVED
    assert run_one(body["id"]).status == StepStatus.COMPLETE
    # A newer version is authorized while the plan runs: what approved it no longer stands.
    make_live(api, READS.replace('"reads"', '"reads-v2"'))
    assert not bases.live(BASIS) and bases.live("policy:default:reads-v2@2")
    again = run_one(body["id"])
    assert (again.status, again.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert "version 1 of default's policy set is no longer live" in problems(body["id"])
    assert len(desk.tickets()) == 1  # its effect never left
    assert Workflow.objects.get(pk=body["id"]).status == WorkflowStatus.FAILED
    # A person's fresh approval lets it go on, the person in its proof.
    decide.approve(Workflow.objects.get(pk=body["id"]), by=people["reviewer"])
    run_until(body["id"], WorkflowStatus.COMPLETE)
    attempt = Attempt.objects.get(step__workflow_id=body["id"], step__key="again")
    assert [a["sub"] for a in attempt.proof_approvers] == [str(people["reviewer"].pk)]


def test_the_seal_covers_the_basis(api, desk):
    make_live(api, READS)
    body = submit(api, opening("tampered"))
    approval = Approval.objects.get(workflow_id=body["id"])
    # Another basis written over it (one that would be live, even): the seal no longer verifies.
    make_live(api, READS.replace('"reads"', '"other"'))
    Approval.objects.filter(pk=approval.pk).update(basis="policy:default:other@2")
    assert not binding.verifies(Approval.objects.get(pk=approval.pk))
    step = run_one(body["id"])
    assert (step.status, step.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")
    assert "seal does not verify" in problems(body["id"])
    assert desk.tickets() == []


def test_an_unknown_kind_of_basis_is_never_live():
    assert bases.not_live(["grant:7", "nothing", "policy:bad"]).keys() == {"grant:7", "nothing", "policy:bad"}


def test_without_a_live_set_every_plan_waits_for_a_person(api):
    body = submit(api, opening("no-set"))
    assert body["status"] == WorkflowStatus.PLANNED
    assert body["steps"][0]["approval"]["reason"] == "no_policy_set"


def test_analytics_count_approvals_by_policy_and_by_people_apart(api, people):
    make_live(api, READS)
    submit(api, opening("count-auto"))
    human = submit(api, ticket_plan("count-human"))
    decide.approve(Workflow.objects.get(pk=human["id"]), by=people["reviewer"])
    outcomes = api["reviewer"].get("/analytics/decisions").json()["outcomes"]
    assert (outcomes["approved"], outcomes["auto"], outcomes["human"]) == (2, 1, 1)
    client = Client()
    client.login(username="reviewer", password=PASSWORD)
    page = client.get("/analytics/").content.decode()
    assert 'data-testid="auto">1<' in page and 'data-testid="human">1<' in page
