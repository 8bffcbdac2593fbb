"""Teams' Cedar policy sets over the API (docs/explanation/policies.md#policies):
an operator of the team proposes, a reviewer of the team (another person)
authorizes; a refused text answers with Cedar's message and its line; the
global set only forbids; every step is decided fail closed."""

import pytest
from django.contrib.auth.models import Group

from tests.support.plans import ticket_plan
from tests.support.policy_sets import make_live, propose
from workflows.models import AuditEvent, Team, Workflow
from workflows.policy import text as policy_text

READS = (
    '@id("reads")\npermit(principal, action == Action::"auto_approve", resource)\n'
    'when { resource.action == "ticket.create" };\n'
)


def evaluate(api, steps, who="agent"):
    answer = api[who].post("/policies/evaluate", {"plan": {"steps": steps}, "agent": "agent"})
    assert answer.status_code == 200, answer.content
    return {s["key"]: s for s in answer.json()["steps"]}


def test_a_version_is_live_only_once_a_reviewer_of_the_team_authorizes_it(api):
    answer = propose(api, READS)
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert (body["policy_set"], body["version"], body["status"]) == ("default", 1, "PENDING")
    assert '+permit(principal, action == Action::"auto_approve", resource)' in body["diff"]
    assert api["reviewer"].get("/policy-sets/default").json()["live"] is None
    assert api["reviewer"].post(f"/policy-changes/{body['id']}/authorize", {"reason": "ok"}).status_code == 200
    shown = api["reviewer"].get("/policy-sets/default").json()
    assert (shown["live"]["version"], shown["live"]["state"], shown["live"]["authorized_by"]) == (1, "LIVE", "reviewer")
    second = make_live(api, READS + '@id("more")\nforbid(principal, action, resource) when { context.hour == 99 };\n')
    history = api["operator"].get("/policy-sets/default").json()["history"]
    assert [(v["version"], v["state"]) for v in history] == [(2, "LIVE"), (1, "SUPERSEDED")]
    assert second["diff"][0] == "--- version 1"
    verbs = list(AuditEvent.objects.filter(verb__startswith="policy_set.").values_list("verb", flat=True))
    assert verbs == ["policy_set.proposed", "policy_set.authorized"] * 2


def test_only_an_operator_of_the_team_proposes_and_another_reviewer_decides(api, people):
    assert propose(api, READS, who="reviewer").status_code == 403
    assert propose(api, READS, who="agent").status_code == 404  # an agent sees no team
    Team.objects.create(name="payments")
    assert propose(api, READS, team="payments").status_code == 404
    change = propose(api, READS, who="admin").json()["id"]
    # admin is a reviewer too, but proposed it: four-eyes by person.
    assert api["admin"].post(f"/policy-changes/{change}/authorize", {"reason": ""}).status_code == 403
    assert api["operator"].post(f"/policy-changes/{change}/authorize", {"reason": ""}).status_code == 403
    assert api["reviewer"].post(f"/policy-changes/{change}/decline", {"reason": "not now"}).status_code == 200
    assert api["reviewer"].get("/policy-sets/default").json()["history"][0]["state"] == "DECLINED"


def test_a_proposal_made_stale_by_a_later_version_is_refused(api):
    first = propose(api, READS).json()["id"]
    make_live(api, READS.replace("reads", "reads2"))
    answer = api["reviewer"].post(f"/policy-changes/{first}/authorize", {"reason": ""})
    assert answer.status_code == 409
    assert api["reviewer"].get("/policy-sets/default").json()["live"]["version"] == 2


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (
            '@id("a")\npermit(principal, action, resource);\n\n'
            '@id("b")\npermit(principal, action, resource)\nwhen { 1 + };\n',
            6,
            "unexpected token",
        ),
        ('@id("a")\npermit(principal, action, resource);\npermit(principal, action, resource);\n', 3, "@id"),
        ('@id("a")\npermit(principal, action, resource)\nwhen { resource.nope == 1 };\n', 1, "attribute `nope`"),
        (
            '@id("a")\npermit(principal, action, resource);\n@id("a")\nforbid(principal, action, resource);\n',
            3,
            "already",
        ),
    ],
)
def test_a_refused_text_answers_with_cedars_message_and_the_line(api, text, line, says):
    answer = propose(api, text)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["line"] == line and says in error["message"] and error["message"].startswith(f"line {line}:")
    assert not AuditEvent.objects.filter(verb="policy_set.proposed").exists()


def test_the_global_set_refuses_a_permit(api, people):
    people["operator"].groups.add(Group.objects.get_or_create(name="global")[0])
    answer = propose(api, READS, team="global")
    assert answer.status_code == 400 and "may only forbid" in answer.json()["error"]["message"]
    forbid = '@id("no-fri")\nforbid(principal, action == Action::"submit", resource) when { context.weekday == 8 };\n'
    assert propose(api, forbid, team="global").status_code == 202


def test_huge_policy_sets_are_refused_before_cedar_reads_them(api):
    huge = "".join(f'@id("p{i}")\npermit(principal, action, resource);\n' for i in range(10_000))
    answer = propose(api, huge)
    assert answer.status_code == 400 and "at most" in answer.json()["error"]["message"]
    many = "".join(f'@id("p{i}") permit(principal,action,resource);' for i in range(policy_text.MAX_POLICIES + 1))
    assert len(many) < policy_text.MAX_TEXT_CHARS
    assert f"at most {policy_text.MAX_POLICIES} policies" in propose(api, many).json()["error"]["message"]


def test_cedars_default_deny_never_blocks_a_submission(api):
    make_live(
        api,
        '@id("only-noop")\npermit(principal, action == Action::"submit", resource)\n'
        'when { resource.action == "noop" };\n',
    )
    assert api["agent"].post("/workflows", ticket_plan()).status_code == 201


def test_a_forbid_refuses_the_submission_naming_it(api):
    make_live(
        api,
        READS + '@id("no-close")\nforbid(principal, action == Action::"submit", resource)\n'
        'when { resource.action == "ticket.close" };\n',
    )
    answer = api["agent"].post("/workflows", ticket_plan())
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "policy_forbidden" and answer.json()["error"]["policies"] == ["no-close"]
    assert not Workflow.objects.exists()


def test_a_policy_that_errors_refuses_the_submission(api):
    overflow = (
        '@id("overflow")\nforbid(principal, action, resource) when { (context.hour + 1) + 9223372036854775807 > 0 };\n'
    )
    make_live(api, overflow)
    answer = api["agent"].post("/workflows", ticket_plan())
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "policy_error"
    assert answer.json()["error"]["policies"] == ["overflow"]
    assert not Workflow.objects.exists()


def test_a_step_is_auto_only_when_permitted_auto_approve(api):
    make_live(api, READS)
    steps = evaluate(
        api,
        [
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
            {"key": "nothing", "action": "noop", "args": {}},
        ],
    )
    assert (steps["open"]["decision"], steps["open"]["policies"]) == ("auto", ["reads"])
    assert steps["nothing"]["decision"] == "human"


def test_a_condition_touching_a_reference_sends_the_step_to_a_human(api):
    # Unless-forbid on a run-time value: Cedar alone would permit, since a
    # reference record is never like "*prod*".
    make_live(
        api,
        '@id("not-prod")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'unless { resource.args has title && resource.args.title like "*prod*" };\n',
    )
    steps = evaluate(
        api,
        [
            {"key": "plain", "action": "ticket.create", "args": {"title": "t"}},
            {"key": "ref", "action": "ticket.create", "args": {"title": {"$from": "plain.result.title"}}},
            {"key": "other", "action": "ticket.create", "args": {"title": "t", "body": {"$from": "plain.result.x"}}},
        ],
    )
    assert steps["plain"]["decision"] == "auto"
    assert (steps["ref"]["decision"], steps["ref"]["policies"]) == ("human", ["not-prod"])
    # A reference the policy does not read changes nothing.
    assert steps["other"]["decision"] == "auto"


def test_irreversible_steps_are_auto_only_with_allow_destructive(api):
    refund = {"order_id": "o-1", "amount_cents": 500, "currency": "EUR", "reason": "late"}
    make_live(
        api,
        '@id("small-refunds")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'when { resource.action == "refunds.refund" };\n',
    )
    assert evaluate(api, [{"key": "r", "action": "refunds.refund", "args": refund}])["r"]["decision"] == "human"
    make_live(
        api,
        '@id("small-refunds")\n@allow_destructive("true")\n'
        'permit(principal, action == Action::"auto_approve", resource)\n'
        'when { resource.action == "refunds.refund" };\n',
    )
    assert evaluate(api, [{"key": "r", "action": "refunds.refund", "args": refund}])["r"]["decision"] == "auto"


def test_annotations_raise_approvals_and_group(api):
    make_live(
        api,
        '@id("big")\n@approvals("2")\n@reviewer_group("finance")\n'
        'permit(principal, action == Action::"submit", resource)\n'
        "when { resource.args has amount_cents && resource.args.amount_cents > 1000 };\n",
    )
    refund = {"order_id": "o-1", "amount_cents": 5000, "currency": "EUR", "reason": "late"}
    step = evaluate(api, [{"key": "r", "action": "refunds.refund", "args": refund}])["r"]
    assert (step["decision"], step["approvals"], step["group"], step["policies"]) == ("human", 2, "finance", ["big"])


def test_a_hostile_plan_is_refused_with_a_clear_error(api):
    make_live(api, READS)
    deep = "x"
    for _ in range(20):
        deep = {"a": deep}
    answer = api["agent"].post(
        "/policies/evaluate",
        {"plan": {"steps": [{"key": "k", "action": "noop", "args": {"d": deep}}]}, "agent": "agent"},
    )
    assert answer.status_code == 400 and "nest at most" in answer.json()["error"]["message"]
    huge = [{"key": f"k{i}", "action": "ticket.create", "args": {"title": "x" * 20_000}} for i in range(30)]
    answer = api["agent"].post("/policies/evaluate", {"plan": {"steps": huge}, "agent": "agent"})
    assert answer.status_code == 400 and "characters" in answer.json()["error"]["message"]


def test_evaluate_is_for_the_agents_team_and_the_agent_itself(api, people):
    make_live(api, READS)
    steps = [{"key": "open", "action": "ticket.create", "args": {"title": "t"}}]
    assert evaluate(api, steps, who="reviewer")["open"]["decision"] == "auto"
    assert evaluate(api, steps, who="operator")["open"]["decision"] == "auto"
    assert api["auditor"].post("/policies/evaluate", {"plan": {"steps": steps}, "agent": "agent"}).status_code == 404
    other = Team.objects.create(name="elsewhere")
    other.members.add(people["reviewer2"])
    assert api["reviewer2"].post("/policies/evaluate", {"plan": {"steps": steps}, "agent": "agent"}).status_code == 404
