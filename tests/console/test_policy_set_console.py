"""Cedar policy sets in the console: an operator proposes (a refusal shows
Cedar's message and line), a reviewer sees the proposal as a diff with what
it would have auto-approved among the team's plans and authorizes it; the
playground evaluates a plan, escaping what the plan says, without JS."""

import json

import pytest

from tests.support.plans import ticket_plan
from tests.support.policy_sets import make_live
from tests.support.seeing import Client
from workflows.models import PolicySet

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
