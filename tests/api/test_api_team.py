"""Workflow answers name the plan's team, in lists and one by one, without
another query per plan."""

from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.support.api import ApiClient
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from workflows import roles
from workflows.models import Team
from workflows.operations import tokens


def _queries(client, path) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured)


def test_workflow_answers_carry_the_team(people, api):
    payments = Team.objects.create(name="payments")
    paid = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(people['agent'], team=payments)}")
    paid_id = paid.post("/api/v1/workflows", ticket_plan("paid"), content_type="application/json").json()["id"]
    plain = api["agent"].post("/workflows", ticket_plan("plain")).json()
    assert plain["team"] == Team.DEFAULT
    assert api["agent"].get(f"/workflows/{plain['id']}").json()["team"] == Team.DEFAULT
    assert paid.get(f"/api/v1/workflows/{paid_id}").json()["team"] == "payments"
    # Someone who sees both teams reads each plan's own team in the list.
    auditor = User.objects.create_user("global-auditor", password=PASSWORD)
    auditor.groups.add(*(Group.objects.get_or_create(name=name)[0] for name in (roles.AUDITORS, roles.GLOBAL)))
    both = ApiClient(auditor)
    listed = {item["id"]: item["team"] for item in both.get("/workflows").json()["items"]}
    assert listed == {plain["id"]: Team.DEFAULT, paid_id: "payments"}
    # The team is read with its plan, not once per plan.
    before = _queries(both, "/workflows")
    for n in range(3):
        paid.post("/api/v1/workflows", ticket_plan(f"more-{n}"), content_type="application/json")
    assert _queries(both, "/workflows") == before
    assert _queries(both, f"/workflows/{paid_id}") == _queries(both, f"/workflows/{plain['id']}")
