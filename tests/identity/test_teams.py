"""Teams (docs/explanation/teams.md#teams): agents' tokens and their plans belong to a team;
people see, decide and replay only within their teams; global roles see
every team; an action policy may name the group whose members alone approve.
"""

import io
import json

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.test import Client as DjangoClient

from tests.support import deciding as decide
from tests.support.api import ApiClient
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import run_job, run_until
from tests.support.seeing import Client
from workflows import actions, outbox, roles
from workflows.actions import ActionError
from workflows.audit import journal
from workflows.engine import execution, outcomes
from workflows.models import ApiToken, AuditEvent, DeadLetter, Team, Workflow
from workflows.operations import compensation, links, persons, policies, tokens
from workflows.shapes import workflow_out
from workflows.states import StepStatus, WorkflowStatus
from workflows.webhooks import endpoints as webhook_endpoints
from workflows.webhooks.models import WebhookDelivery


def person(name, *groups, team=None, **extra):
    user = User.objects.create_user(name, password=PASSWORD, **extra)
    user.groups.add(*(Group.objects.get_or_create(name=group)[0] for group in groups))
    if team is not None:
        team.members.add(user)
    return user


def console(username):
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


class AgentOf:
    """The agent, calling the API with a token of `team`."""

    def __init__(self, user, team):
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(user, team=team)}")

    def submit(self, body):
        response = self.client.post("/api/v1/workflows", body, content_type="application/json")
        assert response.status_code == 201, response.content
        return Workflow.objects.get(pk=response.json()["id"])


@pytest.fixture
def payments(people):
    """Team payments: its own reviewer, operator and auditor, and the agent's payments token."""
    team = Team.objects.create(name="payments")
    return {
        "team": team,
        "reviewer": person("pay-reviewer", roles.REVIEWERS, team=team),
        "reviewer2": person("pay-reviewer2", roles.REVIEWERS, team=team),
        "operator": person("pay-operator", roles.OPERATORS, team=team),
        "auditor": person("pay-auditor", roles.AUDITORS, team=team),
        "agent": AgentOf(people["agent"], team),
    }


def dead_letter_in(workflow, approver):
    """Approve, complete the noop, fail the ticket step for good: a dead letter."""
    decide.approve(workflow, by=approver)
    execution.execute(execution.claim(workflow.pk))
    step = execution.claim(workflow.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("INVALID_ARGUMENTS", "HTTP 400"), step.fence
    )
    return DeadLetter.objects.get(workflow=workflow)


def half_done(key):
    return {
        "name": "half done",
        "submission_key": key,
        "steps": [
            {"key": "first", "action": "noop", "args": {}},
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
        ],
    }


# --- tokens, plans and the commands ---------------------------------------------


def test_a_plan_belongs_to_the_team_of_the_token_it_came_with(people, payments, api):
    paid = payments["agent"].submit(ticket_plan("paid"))
    plain = api["agent"].post("/workflows", ticket_plan("plain"))
    assert paid.team.name == "payments"
    assert Workflow.objects.get(pk=plain.json()["id"]).team.name == Team.DEFAULT
    # Each of the agent's tokens reads only the plans of its own team (docs/explanation/decisions.md#bound-decisions).
    listed = {item["id"] for item in api["agent"].get("/workflows").json()["items"]}
    assert listed == {plain.json()["id"]}
    paid_token = payments["agent"].client
    assert {item["id"] for item in paid_token.get("/api/v1/workflows").json()["items"]} == {str(paid.pk)}
    assert api["agent"].get(f"/workflows/{paid.pk}").status_code == 404
    assert paid_token.get(f"/api/v1/workflows/{plain.json()['id']}").status_code == 404
    # Nor does the same submission_key, sent with the other team's token, hand the plan over.
    again = api["agent"].post("/workflows", ticket_plan("paid"))
    assert again.status_code == 409 and str(paid.pk) not in again.content.decode()


def test_issue_token_names_the_agents_team(people, payments):
    call_command("issue_token", "agent", "--team", "payments", stdout=io.StringIO())
    assert ApiToken.objects.filter(user=people["agent"]).latest("created_at").team.name == "payments"
    call_command("issue_token", "agent", stdout=io.StringIO())
    assert ApiToken.objects.filter(user=people["agent"]).latest("created_at").team.name == Team.DEFAULT
    with pytest.raises(CommandError, match="No team named 'nope'"):
        call_command("issue_token", "agent", "--team", "nope")


def test_the_team_command_adds_teams_and_members_with_clear_errors(people):
    call_command("team", "add", "risk", stdout=io.StringIO())
    risk = Team.objects.get(name="risk")
    for bad in ("Risk Team", "a/b", "x" * 65):
        with pytest.raises(CommandError, match="team name"):
            call_command("team", "add", bad)
    with pytest.raises(CommandError, match="exists already"):
        call_command("team", "add", "risk")
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("team", "member", "risk", "nobody")
    with pytest.raises(CommandError, match="No team named 'ghosts'"):
        call_command("team", "member", "ghosts", "reviewer")
    call_command("team", "member", "risk", "reviewer", stdout=io.StringIO())
    assert list(risk.members.values_list("username", flat=True)) == ["reviewer"]
    call_command("team", "member", "risk", "reviewer", "--remove", stdout=io.StringIO())
    assert not risk.members.exists()
    verbs = list(AuditEvent.objects.filter(object_type="team").values_list("verb", flat=True))
    assert verbs == ["team.created", "team.member_added", "team.member_removed"]


# --- a token reads its own team's work ------------------------------------------------


def team_work(workflow, reviewer, operator) -> dict[str, str]:
    """Objects of every kind a read can show, for `workflow`'s team: the
    plan with a dead letter, a replay job, a compensation, a webhook
    endpoint and a delivery to it."""
    letter = dead_letter_in(workflow, reviewer)
    job = ApiClient(operator).post(
        "/dead-letters/replay", {"filter": {"action": "ticket.create"}, "dry_run": False, "reason": "the desk is back"}
    )
    assert job.status_code == 202, job.content
    comp = compensation.request(workflow, by=operator, reason="undo the first step")
    endpoint, _ = webhook_endpoints.create(by=operator, url=f"https://hooks.example.com/{workflow.pk}")
    outbox.emit("workflow.revised", workflow.pk, shape=workflow_out)
    return {
        "workflow": str(workflow.pk),
        "dead_letter": str(letter.pk),
        "job": job.json()["job"],
        "compensation": str(comp.pk),
        "endpoint": str(endpoint.pk),
        "delivery": str(WebhookDelivery.objects.get(endpoint=endpoint).pk),
    }


class TokenFor(ApiClient):
    """`ApiClient` through a token issued for `team`."""

    def __init__(self, user, team):
        self.user = user
        self.client = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(user, team=team)}")


def reads(client: ApiClient, work: dict[str, str]) -> dict[str, bool]:
    """Whether each read endpoint shows `work` through this token."""

    def listed(path, key):
        return work[key] in {str(item["id"]) for item in client.get(path, limit=200).json()["items"]}

    audit = client.get("/audit", limit=500).json()["items"]
    return {
        "workflows": listed("/workflows", "workflow"),
        "workflow": client.get(f"/workflows/{work['workflow']}").status_code == 200,
        "wait": client.get(f"/workflows/{work['workflow']}/wait", until="decision", timeout=1).status_code == 200,
        "dead_letters": listed("/dead-letters", "dead_letter"),
        "dead_letter": client.get(f"/dead-letters/{work['dead_letter']}").status_code == 200,
        "replay_preview": client.get(f"/dead-letters/{work['dead_letter']}/preview").status_code == 200,
        "job": client.get(f"/jobs/{work['job']}").status_code == 200,
        "compensation": client.get(f"/compensations/{work['compensation']}").status_code == 200,
        "audit": any(row["workflow_id"] == work["workflow"] for row in audit),
        "audit_of_job": any(row["object_id"] == work["job"] for row in audit),
        "audit_filtered": bool(client.get("/audit", workflow=work["workflow"]).json()["items"]),
        "audit_verify": client.post("/audit/verify", {"workflow": work["workflow"]}).status_code == 200,
        "webhooks": listed("/webhooks", "endpoint"),
        "webhook": client.get(f"/webhooks/{work['endpoint']}").status_code == 200,
        "deliveries": listed("/webhook-deliveries", "delivery"),
    }


def test_a_token_reads_only_its_teams_work_whoever_holds_it(people, payments, api):
    """A token issued for payments reads nothing of the default team, held
    by a global superuser, by someone in both teams, or by the person who
    submitted the plan there themselves (docs/explanation/decisions.md#bound-decisions); without a token, the
    same people see both teams."""
    plain = Workflow.objects.get(
        pk=ApiClient(people["admin"]).post("/workflows", half_done("plain-half")).json()["id"]
    )  # submitted by admin, for default: they are in no team
    theirs = team_work(plain, people["reviewer"], people["operator"])
    ours = team_work(payments["agent"].submit(half_done("paid-half")), payments["reviewer"], payments["operator"])
    everyone = (roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS)
    root = person("root", *everyone, roles.GLOBAL, is_superuser=True)
    both = person("both", *everyone, team=payments["team"])
    Team.objects.get(name=Team.DEFAULT).members.add(both)
    holders = {"root": root, "both": both, "the submitter": people["admin"]}
    payments["team"].members.add(people["admin"])  # into payments too, so it reads there

    for name, holder in holders.items():
        through = TokenFor(holder, payments["team"])
        assert not any(reads(through, theirs).values()), (name, reads(through, theirs))
        assert all(reads(through, ours).values()), (name, reads(through, ours))
        assert through.get(f"/workflows/{theirs['workflow']}").status_code == 404
        assert through.get(f"/dead-letters/{theirs['dead_letter']}").status_code == 404
        replayed = through.post(f"/webhook-deliveries/{theirs['delivery']}/replay", {"reason": "again"})
        assert replayed.status_code == 404, name
        # Without a token (the console), the same person sees the other team's plan.
        session = Client()
        session.force_login(holder)
        assert session.get(f"/workflows/{theirs['workflow']}/").status_code == 200, name


# --- seeing and deciding within one's teams ---------------------------------------


def test_people_see_and_decide_only_within_their_teams(people, payments):
    paid = payments["agent"].submit(ticket_plan("paid"))
    other = console("reviewer")  # in no team: the default team's
    assert str(paid.pk) not in other.get("/").content.decode()
    assert str(paid.pk) not in other.get("/workflows/").content.decode()
    assert other.get(f"/workflows/{paid.pk}/").status_code == 404
    assert other.post(f"/workflows/{paid.pk}/approve", {"comment": "x"}).status_code == 404
    other_api = ApiClient(people["reviewer"])
    assert other_api.get(f"/workflows/{paid.pk}").status_code == 404
    assert other_api.post(f"/workflows/{paid.pk}/approve").status_code == 404
    assert other_api.get("/workflows").json()["items"] == []
    # The operation itself refuses too, whoever calls it.
    with pytest.raises(Exception) as refused:
        decide.approve(paid, by=people["reviewer"])
    assert getattr(refused.value, "status", None) == 404
    assert Workflow.objects.get(pk=paid.pk).status == WorkflowStatus.PLANNED

    mine = console("pay-reviewer")
    assert str(paid.pk) in mine.get("/").content.decode()
    assert mine.post(f"/workflows/{paid.pk}/approve", {"comment": "ok"}).status_code == 302
    assert Workflow.objects.get(pk=paid.pk).status == WorkflowStatus.APPROVED


def test_a_person_in_no_team_belongs_to_default_until_they_join_one(people, payments, api):
    plain = Workflow.objects.get(pk=api["agent"].post("/workflows", ticket_plan("plain")).json()["id"])
    paid = payments["agent"].submit(ticket_plan("paid"))
    reviewer = console("reviewer")
    assert reviewer.get(f"/workflows/{plain.pk}/").status_code == 200
    payments["team"].members.add(people["reviewer"])
    assert reviewer.get(f"/workflows/{plain.pk}/").status_code == 404
    assert reviewer.get(f"/workflows/{paid.pk}/").status_code == 200


def test_global_auditors_and_superusers_see_every_team(people, payments, api):
    paid = payments["agent"].submit(ticket_plan("paid"))
    plain = api["agent"].post("/workflows", ticket_plan("plain")).json()["id"]
    person("all-seeing", roles.AUDITORS, roles.GLOBAL)
    person("root", roles.REVIEWERS, is_superuser=True)
    for name in ("all-seeing", "root"):
        client = console(name)
        assert client.get(f"/workflows/{paid.pk}/").status_code == 200
        assert client.get(f"/workflows/{plain}/").status_code == 200
    audit = console("all-seeing").get("/audit/").content.decode()
    assert str(paid.pk) in audit and plain in audit
    # The global group gives nothing to someone who is neither an auditor nor a superuser.
    person("global-operator", roles.OPERATORS, roles.GLOBAL)
    assert console("global-operator").get(f"/workflows/{paid.pk}/").status_code == 404


def test_audit_pages_and_exports_hold_only_the_auditors_teams(people, payments, api):
    paid = payments["agent"].submit(ticket_plan("paid"))
    plain = api["agent"].post("/workflows", ticket_plan("plain")).json()["id"]
    auditor = console("pay-auditor")
    page = auditor.get("/audit/").content.decode()
    assert str(paid.pk) in page and plain not in page
    export = b"".join(auditor.get("/audit/export.jsonl").streaming_content).decode()
    assert str(paid.pk) in export and plain not in export
    api_rows = ApiClient(payments["auditor"]).get("/audit").json()["items"]
    assert {row["workflow_id"] for row in api_rows} - {None} == {str(paid.pk)}
    assert ApiClient(payments["auditor"]).post("/audit/verify", {"workflow": plain}).status_code == 404


def test_auditors_outside_global_see_only_their_teams_events_of_every_kind(people, payments, api):
    """Sign-ins, jobs, grants and links too, not only plans' events (docs/explanation/decisions.md#bound-decisions)."""
    paid = dead_letter_in(payments["agent"].submit(half_done("paid-half")), payments["reviewer"])
    dead_letter_in(
        Workflow.objects.get(pk=api["agent"].post("/workflows", half_done("plain-half")).json()["id"]),
        people["reviewer"],
    )
    jobs = {}
    for name, operator in (("paid", payments["operator"]), ("plain", people["operator"])):
        answer = ApiClient(operator).post(
            "/dead-letters/replay",
            {"filter": {"action": "ticket.create"}, "dry_run": False, "reason": "the desk is back"},
        )
        assert answer.status_code == 202, answer.content
        jobs[name] = answer.json()["job"]
    with transaction.atomic():
        for user in (payments["reviewer"], people["reviewer"]):
            journal.append(actor=user, verb="user.signed_in", obj_type="user", obj_id=user.pk, data={"via": "oidc"})
    persons.link(people["reviewer"], people["reviewer2"], by=None)
    mine = {
        (row["object_type"], row["object_id"])
        for row in ApiClient(payments["auditor"]).get("/audit", limit=500).json()["items"]
    }
    assert ("job", jobs["paid"]) in mine and ("job", jobs["plain"]) not in mine
    assert ("user", str(payments["reviewer"].pk)) in mine and ("user", str(people["reviewer"].pk)) not in mine
    assert not any(kind == "person" for kind, _ in mine)
    assert (
        str(paid.workflow_id) in b"".join(console("pay-auditor").get("/audit/export.jsonl").streaming_content).decode()
    )
    # The default team's auditor sees the other half; a global auditor sees it all.
    theirs = {(row["object_type"], row["object_id"]) for row in api["auditor"].get("/audit", limit=500).json()["items"]}
    assert ("job", jobs["plain"]) in theirs and ("job", jobs["paid"]) not in theirs
    assert ("user", str(people["reviewer"].pk)) in theirs and ("user", str(payments["reviewer"].pk)) not in theirs
    person("all-seeing", roles.AUDITORS, roles.GLOBAL)
    exported = b"".join(console("all-seeing").get("/audit/export.jsonl").streaming_content).decode()
    everything = {(row["object_type"], row["object_id"]) for row in map(json.loads, exported.splitlines())}
    assert mine | theirs <= everything and any(kind == "person" for kind, _ in everything)
    # Through a token, even theirs, only the token's team (docs/explanation/decisions.md#bound-decisions).
    global_token = ApiClient(User.objects.get(username="all-seeing"))  # for default: they are in no team
    assert {
        (row["object_type"], row["object_id"]) for row in global_token.get("/audit", limit=500).json()["items"]
    } == theirs


def test_bulk_replay_touches_only_the_operators_teams(people, payments, api):
    paid = dead_letter_in(payments["agent"].submit(half_done("paid-half")), payments["reviewer"])
    plain = dead_letter_in(
        Workflow.objects.get(pk=api["agent"].post("/workflows", half_done("plain-half")).json()["id"]),
        people["reviewer"],
    )
    response = ApiClient(people["operator"]).post(
        "/dead-letters/replay", {"filter": {"action": "ticket.create"}, "dry_run": False, "reason": "the desk is back"}
    )
    assert response.status_code == 202, response.content
    assert response.json()["matched"] == 1
    run_job(response.json()["job"])
    assert DeadLetter.objects.get(pk=plain.pk).status == DeadLetter.Status.REPLAYED
    assert DeadLetter.objects.get(pk=paid.pk).status == DeadLetter.Status.OPEN
    # The console's bulk replay, naming the other team's entry by id, replays nothing.
    client = console("operator")
    client.post("/dead-letters/bulk/replay", {"ids": [str(paid.pk)], "reason": "r"})
    assert DeadLetter.objects.get(pk=paid.pk).status == DeadLetter.Status.OPEN
    assert client.get(f"/dead-letters/{paid.pk}/").status_code == 404


def test_assigning_and_review_links_stay_within_the_team(people, payments):
    paid = payments["agent"].submit(ticket_plan("paid"))
    response = ApiClient(payments["reviewer"]).post(f"/workflows/{paid.pk}/assign", {"to": "reviewer"})
    assert response.status_code == 400 and "team" in response.json()["error"]["fields"]["to"]
    token = links.make(paid, payments["reviewer"], "approve")
    payments["team"].members.remove(payments["reviewer"])
    assert console("pay-reviewer").get(f"/review/link/{token}/").status_code == 404


# --- webhooks and metrics ---------------------------------------------------------


def test_an_endpoint_hears_only_its_teams_plans(people, payments, api):
    pay_endpoint, _ = webhook_endpoints.create(by=payments["operator"], url="https://hooks.example.com/pay")
    plain_endpoint, _ = webhook_endpoints.create(by=people["operator"], url="https://hooks.example.com/plain")
    assert (pay_endpoint.team.name, plain_endpoint.team.name) == ("payments", Team.DEFAULT)
    paid = payments["agent"].submit(ticket_plan("paid"))
    outbox.emit("workflow.revised", paid.pk, shape=workflow_out)
    assert list(WebhookDelivery.objects.values_list("endpoint", flat=True)) == [pay_endpoint.pk]
    # Another team's endpoint cannot be chosen, nor seen.
    refused = ApiClient(people["operator"]).post(
        "/webhooks", {"url": "https://hooks.example.com/x", "team": "payments"}
    )
    assert refused.status_code == 400 and "team" in refused.json()["error"]["fields"]
    assert ApiClient(people["operator"]).get(f"/webhooks/{pay_endpoint.pk}").status_code == 404
    listed = ApiClient(people["operator"]).get("/webhook-deliveries").json()["items"]
    assert listed == []


def test_metrics_give_each_team_its_own_series(people, payments, api):
    payments["agent"].submit(ticket_plan("paid"))
    api["agent"].post("/workflows", ticket_plan("plain"))
    text = Client().get("/metrics").content.decode()
    assert 'durable_team_workflows{team="payments",status="PLANNED"} 1' in text
    assert 'durable_team_workflows{team="default",status="PLANNED"} 1' in text
    assert 'durable_workflows{status="PLANNED"} 2' in text


def test_the_dashboard_counts_only_the_users_teams(people, payments, api):
    dead_letter_in(payments["agent"].submit(half_done("paid-half")), payments["reviewer"])
    pay = console("pay-operator").get("/dashboard/")
    plain = console("operator").get("/dashboard/")
    ages = lambda response: sum(bar["value"] for bar in response.context["ages_chart"]["bars"])  # noqa: E731
    assert (ages(pay), ages(plain)) == (1, 0)
    attention = console("operator").get("/attention/").context["sections"][0]
    assert attention["count"] == "0"


# --- reviewer groups ----------------------------------------------------------------


@pytest.fixture
def refund_reviewers(people, payments):
    """Only members of refund-reviewers approve a plan using noop."""
    group = Group.objects.create(name="refund-reviewers")
    payments["reviewer2"].groups.add(group)
    result = policies.change(
        "noop",
        by=people["operator"],
        reason="refunds need their reviewers",
        changes={"reviewer_group": "refund-reviewers"},
    )
    assert result.applied and result.request is None  # naming a group where any reviewer could: a tightening
    return group


def noop_plan(key, **step):
    return {"name": "refund", "submission_key": key, "steps": [{"key": "refund", "action": "noop", "args": {}, **step}]}


def test_only_the_policys_reviewer_group_approves(people, payments, refund_reviewers):
    plan = payments["agent"].submit(noop_plan("r1"))
    refused = ApiClient(payments["reviewer"]).post(f"/workflows/{plan.pk}/approve")
    assert refused.status_code == 403
    assert "refund-reviewers" in refused.json()["error"]["message"] and "noop" in refused.json()["error"]["message"]
    page = console("pay-reviewer").post(f"/workflows/{plan.pk}/approve", {"comment": "x"}, follow=True)
    assert "refund-reviewers" in page.content.decode()
    assert Workflow.objects.get(pk=plan.pk).status == WorkflowStatus.PLANNED
    assert ApiClient(payments["reviewer2"]).post(f"/workflows/{plan.pk}/approve").status_code == 200
    assert Workflow.objects.get(pk=plan.pk).status == WorkflowStatus.APPROVED


def test_the_recheck_drops_approvals_of_reviewers_who_left_the_group(people, payments, refund_reviewers):
    kept = payments["agent"].submit(noop_plan("kept"))
    decide.approve(kept, by=payments["reviewer2"])
    assert run_until(kept.pk, {WorkflowStatus.COMPLETE, WorkflowStatus.FAILED}) == WorkflowStatus.COMPLETE

    left = payments["agent"].submit(noop_plan("left"))
    decide.approve(left, by=payments["reviewer2"])
    payments["reviewer2"].groups.remove(refund_reviewers)
    assert run_until(left.pk, {WorkflowStatus.COMPLETE, WorkflowStatus.FAILED}) == WorkflowStatus.FAILED
    step = left.steps.get()
    assert step.status == StepStatus.BLOCKED and step.failure_class == "POLICY_FAILED"
    assert not step.attempts.exists()


def test_a_gate_is_approved_only_by_the_reviewer_group(people, payments, refund_reviewers):
    plan = payments["agent"].submit(
        {
            "name": "gated",
            "submission_key": "g",
            "steps": [
                {"key": "first", "action": "noop", "args": {}},
                {"key": "second", "action": "noop", "args": {}, "gate": {"approvals": 1}},
            ],
        }
    )
    decide.approve(plan, by=payments["reviewer2"])
    assert run_until(plan.pk, WorkflowStatus.WAITING_GATE) == WorkflowStatus.WAITING_GATE
    refused = ApiClient(payments["reviewer"]).post(f"/workflows/{plan.pk}/steps/second/approve")
    assert refused.status_code == 403 and "refund-reviewers" in refused.json()["error"]["message"]
    assert ApiClient(payments["reviewer2"]).post(f"/workflows/{plan.pk}/steps/second/approve").status_code == 200


def test_changing_or_clearing_a_reviewer_group_needs_a_second_operator(people, refund_reviewers):
    Group.objects.create(name="other-reviewers")
    operator = ApiClient(people["operator"])
    for value in ("other-reviewers", "", None):
        response = operator.patch("/actions/noop/policy", {"reviewer_group": value, "reason": "r"})
        assert response.status_code == 202, response.content
        assert response.json()["changes"] == {"reviewer_group": value or ""}
    bad = operator.patch("/actions/noop/policy", {"reviewer_group": "no-such-group", "reason": "r"})
    assert bad.status_code == 400 and "reviewer_group" in bad.json()["error"]["fields"]
    assert operator.get("/actions/noop/policy").json()["reviewer_group"] == "refund-reviewers"
    page = console("operator").get("/actions/noop/policy").content.decode()
    assert 'name="reviewer_group"' in page and "refund-reviewers" in page


def test_only_the_team_reviewers_who_may_approve_are_told(people, payments, refund_reviewers, mailoutbox):
    from workflows.operations import notifications

    for user in (people["reviewer"], payments["reviewer"], payments["reviewer2"]):
        user.email = f"{user.username}@example.com"
        user.save(update_fields=["email"])
    paid = payments["agent"].submit(ticket_plan("paid"))
    notifications.notify_reviewers(paid.pk)
    assert sorted(m.to[0] for m in mailoutbox) == ["pay-reviewer2@example.com", "pay-reviewer@example.com"]
    mailoutbox.clear()
    refund = payments["agent"].submit(noop_plan("refund"))
    notifications.notify_reviewers(refund.pk)
    assert [m.to[0] for m in mailoutbox] == ["pay-reviewer2@example.com"]
