"""Cedar policy sets in the console: an operator proposes (a refusal shows
Cedar's message and line), a reviewer sees the proposal as a diff with what
it would have auto-approved among the team's plans and authorizes it; the
playground evaluates a plan, escaping what the plan says, without JS."""

import json

import pytest

from tests.support.plans import ticket_plan
from tests.support.policy_sets import make_live
from tests.support.seeing import Client
from workflows.models import PolicySet, PolicySetVersion
from workflows.operations import policy_sets

READS = (
    '@id("reads")\npermit(principal, action == Action::"auto_approve", resource)\n'
    'when { resource.action == "ticket.create" };\n'
)


@pytest.fixture
def as_user(people):
    def login(name):
        client = Client()
        client.force_login(people[name])
        return client

    return login


def test_an_operator_proposes_and_a_reviewer_authorizes_from_the_diff(as_user, api):
    assert api["agent"].post("/workflows", {**ticket_plan(), "steps": ticket_plan()["steps"][:1]}).status_code == 201
    operator = as_user("operator")
    refused = operator.post(
        "/policy-sets/default/", {"text": '@id("a")\npermit(principal, action, resource)\nwhen { 1 + };'}
    )
    assert refused.status_code == 400
    assert "line 3: unexpected token" in refused.content.decode()
    assert operator.post("/policy-sets/default/", {"text": READS}).status_code == 302
    reviewer = as_user("reviewer")
    page = reviewer.get("/policy-sets/default/").content.decode()
    assert "+@id(&quot;reads&quot;)" in page
    assert "would have auto-approved 1, including 0 with a destructive" in " ".join(page.split())
    change = PolicySet.objects.get(name="default").versions.get().change
    assert reviewer.post(f"/policy-changes/{change.pk}/authorize", {"reason": ""}).status_code == 302
    assert PolicySet.objects.get(name="default").live_version == 1


def test_the_playground_evaluates_and_escapes(as_user, api):
    make_live(api, READS)
    plan = {"steps": [{"key": "open", "action": "ticket.create", "args": {"title": "<script>x</script>"}}]}
    answer = as_user("reviewer").post("/policy-sets/default/playground", {"agent": "agent", "plan": json.dumps(plan)})
    assert answer.status_code == 200
    page = answer.content.decode()
    assert "<td>auto</td>" in page and "<td>reads</td>" in page and "<script>x" not in page
    bad = {"agent": "agent", "plan": json.dumps({"steps": [{"key": "k", "action": "noop", "args": {"<b>": "["}}]})}
    deep = "[" * 5000 + "]" * 5000
    assert as_user("reviewer").post("/policy-sets/default/playground", bad).status_code == 200
    refused = as_user("reviewer").post("/policy-sets/default/playground", {"agent": "agent", "plan": deep})
    assert refused.status_code == 400 and "nest at most 16 levels" in refused.content.decode()


def test_a_proposals_replay_is_done_once_when_proposed_not_on_each_page_load(as_user, api):
    plan = {**ticket_plan(), "steps": ticket_plan()["steps"][:1]}
    assert api["agent"].post("/workflows", plan).status_code == 201
    assert as_user("operator").post("/policy-sets/default/", {"text": READS}).status_code == 302
    version = PolicySetVersion.objects.get(policy_set__name="default")
    assert version.replay == {"plans": 1, "auto": 1, "destructive_count": 0, "destructive": []}
    # A plan submitted since changes nothing the page says: it reads the replay stored with the proposal.
    later = {**plan, "submission_key": "later", "name": "later"}
    assert api["agent"].post("/workflows", later).status_code == 201
    reviewer = as_user("reviewer")
    page = " ".join(reviewer.get("/policy-sets/default/").content.decode().split())
    assert "Of the last 1 plan of default, this version would have auto-approved 1, including 0" in page
    # A version proposed before replays were stored is replayed on its first showing, then stored.
    PolicySetVersion.objects.filter(pk=version.pk).update(replay=None)
    page = " ".join(reviewer.get("/policy-sets/default/").content.decode().split())
    assert "Of the last 2 plans of default, this version would have auto-approved 2" in page
    assert PolicySetVersion.objects.get(pk=version.pk).replay["plans"] == 2


def test_the_replay_names_the_irreversible_plans_it_would_have_approved(api):
    close = {"key": "close", "action": "ticket.close", "args": {"ticket_id": 7}}
    submitted = api["agent"].post("/workflows", {"name": "close <b>", "submission_key": "c", "steps": [close]})
    assert submitted.status_code == 201, submitted.content
    plain = '@id("all")\npermit(principal, action == Action::"auto_approve", resource);\n'
    # Irreversible: auto-approved only by a permit that allows it.
    assert policy_sets.replay("default", plain) == {"plans": 1, "auto": 0, "destructive_count": 0, "destructive": []}
    allowing = plain.replace("\npermit", '\n@allow_destructive("true")\npermit')
    replayed = policy_sets.replay("default", allowing)
    assert (replayed["auto"], replayed["destructive_count"]) == (1, 1)
    assert replayed["destructive"] == [{"id": submitted.json()["id"], "name": "close <b>"}]
