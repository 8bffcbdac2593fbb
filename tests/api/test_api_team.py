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
    # A global auditor's token reads its own team's plans, each naming it.
    auditor = User.objects.create_user("global-auditor", password=PASSWORD)
    auditor.groups.add(*(Group.objects.get_or_create(name=name)[0] for name in (roles.AUDITORS, roles.GLOBAL)))
    for team, expected in (
        (Team.objects.get(name=Team.DEFAULT), {plain["id"]: Team.DEFAULT}),
        (payments, {paid_id: "payments"}),
    ):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(auditor, team=team)}")
        listed = {item["id"]: item["team"] for item in client.get("/api/v1/workflows").json()["items"]}
        assert listed == expected
    # The team is read with its plan, not once per plan.
    reader = ApiClient(people["agent"])
    reader.get("/workflows")  # a token's first use is recorded once
    before = _queries(reader, "/workflows")
    for n in range(3):
        api["agent"].post("/workflows", ticket_plan(f"more-{n}"))
    assert _queries(reader, "/workflows") == before
    assert _queries(reader, f"/workflows/{plain['id']}") == _queries(paid, f"/api/v1/workflows/{paid_id}")
