"""`GET /api/v1/analytics/decisions` (docs/guides/analytics.md): exact
numbers on known decisions, the same on SQLite and PostgreSQL; only the
caller's teams; `since` as a time or an age; bad filters refused."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.utils import timezone

from tests.support.analytics import decided, team_of
from tests.support.api import ApiClient
from tests.support.personas import PASSWORD
from workflows import roles
from workflows.models import DecisionAction, DecisionRecord, ReviewNotice, Team, Workflow
from workflows.operations import analytics, plans, tokens

PATH = "/analytics/decisions"


def noop_plan(key, action="noop"):
    return {"name": "analytics", "submission_key": key, "steps": [{"key": "s", "action": action, "args": {}}]}


def test_times_outcomes_and_groups_of_known_decisions(api):
    decided(10, reviewer="user:7", actor="ann", actions=("noop", "ticket.create"))
    decided(20, outcome="rejected", reviewer="user:7", actor="ann")
    decided(300, reviewer="person:x", actor="bob", actions=("ticket.create",))
    decided(5000, outcome="expired", actor="system")
    decided(40, outcome="cancelled", actor="agent")
    answer = api["reviewer"].get(PATH).json()
    assert answer["decisions"] == 3
    # percentile_cont: p95 lies between 20 and 300, 90% of the way.
    assert answer["time_to_decision_seconds"] == {"p50": 20.0, "p95": 272.0, "max": 300.0}
    assert answer["outcomes"] == {"approved": 2, "rejected": 1, "expired": 1, "cancelled": 1, "auto": 0, "human": 2}
    assert answer["by_team"] == [
        {
            "team": "default",
            "decisions": 3,
            "approved": 2,
            "auto": 0,
            "human": 2,
            "rejected": 1,
            "expired": 1,
            "cancelled": 1,
            "p50": 20.0,
            "p95": 272.0,
            "max": 300.0,
        }
    ]
    by_action = {item["action"]: item for item in answer["by_action"]}
    assert by_action["noop"]["decisions"] == 2 and by_action["noop"]["expired"] == 1
    assert (by_action["noop"]["p50"], by_action["noop"]["max"]) == (15.0, 20.0)
    assert (by_action["ticket.create"]["decisions"], by_action["ticket.create"]["p50"]) == (2, 155.0)
    assert answer["by_reviewer"] == [
        {"reviewer": "user:7", "name": "ann", "decisions": 2, "approved": 1, "rejected": 1,
         "p50": 15.0, "p95": 19.5, "max": 20.0},
        {"reviewer": "person:x", "name": "bob", "decisions": 1, "approved": 1, "rejected": 0,
         "p50": 300.0, "p95": 300.0, "max": 300.0},
    ]  # fmt: skip
    # Filtered by action, a plan counts under that action alone.
    only = api["reviewer"].get(PATH, action="ticket.create").json()
    assert (only["decisions"], only["time_to_decision_seconds"]["max"], only["outcomes"]["expired"]) == (2, 300.0, 0)


def test_no_decisions_answer_zeros_and_nulls(api):
    answer = api["auditor"].get(PATH).json()
    assert answer["decisions"] == 0
    assert answer["time_to_decision_seconds"] == {"p50": None, "p95": None, "max": None}
    assert answer["by_team"] == answer["by_action"] == answer["by_reviewer"] == []


def test_an_approval_without_a_person_counts_as_auto(api):
    decided(30, reviewer="", actor="policy")
    decided(60)
    answer = api["reviewer"].get(PATH).json()
    assert answer["outcomes"]["approved"] == 2 and answer["outcomes"]["auto"] == 1
    assert answer["outcomes"]["human"] == 1
    assert (answer["by_team"][0]["auto"], answer["by_team"][0]["human"]) == (1, 1)
    # Time to decision is a person's: the policy's 30 s is not among it.
    assert answer["time_to_decision_seconds"] == {"p50": 60.0, "p95": 60.0, "max": 60.0}
    assert [item["reviewer"] for item in answer["by_reviewer"]] == ["user:1"]


def test_reviewers_and_auditors_read_them_others_do_not(api):
    assert api["reviewer"].get(PATH).status_code == 200
    assert api["auditor"].get(PATH).status_code == 200
    for persona in ("operator", "agent"):
        refused = api[persona].get(PATH)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert Client().get(f"/api/v1{PATH}").status_code == 401


@pytest.fixture
def two_teams(people):
    red_auditor = User.objects.create_user("red-auditor", password=PASSWORD)
    red_auditor.groups.add(Group.objects.get(name=roles.AUDITORS))
    red, blue = team_of("red", red_auditor), team_of("blue")
    decided(10, team=red)
    decided(99, team=blue)
    decided(77, team=blue)
    return red, blue, red_auditor


def test_an_auditor_reads_only_their_teams(two_teams, people):
    red, blue, red_auditor = two_teams
    answer = ApiClient(red_auditor).get(PATH).json()
    assert (answer["decisions"], answer["time_to_decision_seconds"]["max"]) == (1, 10.0)
    assert [item["team"] for item in answer["by_team"]] == ["red"]
    refused = ApiClient(red_auditor).get(PATH, team="blue")
    assert refused.status_code == 400 and "team" in refused.json()["error"]["fields"]
    # The same message for a team that does not exist: nothing tells them blue is there.
    unknown = ApiClient(red_auditor).get(PATH, team="green").json()["error"]["fields"]
    assert unknown == refused.json()["error"]["fields"]


def test_a_global_auditor_reads_every_team_but_a_token_reads_its_own(two_teams, people):
    red, blue, _ = two_teams
    auditor = people["auditor"]
    auditor.groups.add(Group.objects.get_or_create(name=roles.GLOBAL)[0])
    # Without a token (the console), a global auditor reads every team.
    auditor = User.objects.get(pk=auditor.pk)
    everything = analytics.decisions(auditor, analytics.parse(auditor, since=None, team=None, action=None))
    assert {item["team"] for item in everything["by_team"]} == {"red", "blue"}
    blue_token = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(auditor, team=blue)}")
    answer = blue_token.get(f"/api/v1{PATH}").json()
    assert (answer["decisions"], [item["team"] for item in answer["by_team"]]) == (2, ["blue"])
    assert blue_token.get(f"/api/v1{PATH}", {"team": "red"}).status_code == 400


def test_since_takes_an_age_or_an_iso_time(api):
    decided(10, ago=timedelta(days=2))
    decided(20, ago=timedelta(days=10))
    decided(30, ago=timedelta(days=40))
    count = lambda **params: api["reviewer"].get(PATH, **params).json()["decisions"]  # noqa: E731
    assert count() == 2  # 30d by default
    assert count(since="7d") == 1
    assert count(since="36h") == 0
    eleven_days = timezone.now() - timedelta(days=11)
    assert count(since=eleven_days.astimezone(UTC).isoformat()) == 2
    assert count(since=eleven_days.strftime("%Y-%m-%dT%H:%M:%SZ")) == 2
    assert count(since=eleven_days.strftime("%Y-%m-%dT%H:%M:%S")) == 2  # naive: UTC
    assert count(since="2000-01-01") == 3
    answer = api["reviewer"].get(PATH, since="7d").json()
    assert abs((timezone.now() - timedelta(days=7)).timestamp() - _parse(answer["since"]).timestamp()) < 60


def _parse(text):
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("params", "fields"),
    [
        ({"since": "yesterday"}, {"since"}),
        ({"since": "0d"}, {"since"}),
        ({"since": "99999999999d"}, {"since"}),
        ({"since": "7 d"}, {"since"}),
        ({"since": "2999-01-01T00:00:00Z"}, {"since"}),
        ({"team": "nobody-s"}, {"team"}),
        ({"action": "no.such"}, {"action"}),
        ({"since": "-1d", "team": "x", "action": "y"}, {"since", "team", "action"}),
    ],
)
def test_bad_filters_are_400_naming_each_field(api, params, fields):
    refused = api["reviewer"].get(PATH, **params)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid" and set(error["fields"]) == fields


def test_an_action_no_longer_installed_is_still_a_filter(api):
    decided(10, actions=("retired.action",))
    assert api["reviewer"].get(PATH, action="retired.action").json()["decisions"] == 1


def test_the_open_queue_by_age(people, api):
    now = timezone.now()
    for n, age in enumerate((timedelta(0), timedelta(hours=2), timedelta(days=2), timedelta(days=10))):
        workflow = plans.submit(people["agent"], noop_plan(f"open-{n}")).workflow
        Workflow.objects.filter(pk=workflow.pk).update(created_at=now - age - timedelta(seconds=1))
    other = team_of("elsewhere")
    elsewhere = plans.submit(people["agent"], noop_plan("open-other")).workflow
    Workflow.objects.filter(pk=elsewhere.pk).update(team=other, created_at=now - timedelta(days=30))
    answer = api["reviewer"].get(PATH).json()
    assert answer["open_by_age"] == [
        {"older_than_seconds": 0, "count": 4},
        {"older_than_seconds": 3600, "count": 3},
        {"older_than_seconds": 14400, "count": 2},
        {"older_than_seconds": 86400, "count": 2},
        {"older_than_seconds": 604800, "count": 1},
    ]
    assert api["reviewer"].get(PATH, action="ticket.create").json()["open_by_age"][0]["count"] == 0


def test_reminders_and_escalations_sent_are_counted(people, api):
    mine = plans.submit(people["agent"], noop_plan("noticed")).workflow
    other = team_of("elsewhere")
    theirs = plans.submit(people["agent"], noop_plan("theirs")).workflow
    Workflow.objects.filter(pk=theirs.pk).update(team=other)
    now = timezone.now()
    made = []

    def notice(workflow, kind, outcome, sent_ago=timedelta(hours=1)):
        made.append(
            ReviewNotice.objects.create(
                workflow=workflow,
                kind=kind,
                due_at=now - timedelta(minutes=len(made)),
                deadline=now,
                sent_at=now - sent_ago,
                outcome=outcome,
            )
        )

    notice(mine, ReviewNotice.Kind.REMINDER, "2 reviewer(s) reminded")
    notice(mine, ReviewNotice.Kind.REMINDER, "1 reviewer(s) reminded")
    notice(mine, ReviewNotice.Kind.REMINDER, "0 reviewer(s) reminded", sent_ago=timedelta(days=40))
    notice(mine, ReviewNotice.Kind.ESCALATION, "3 people told")
    notice(mine, ReviewNotice.Kind.ESCALATION, "not sent: the plan is APPROVED")
    notice(theirs, ReviewNotice.Kind.ESCALATION, "1 people told")
    answer = api["reviewer"].get(PATH).json()
    assert (answer["reminders_sent"], answer["escalations_sent"]) == (2, 1)
    assert Team.objects.filter(name="elsewhere").exists()


def test_postgresql_and_python_compute_the_same_numbers(people):
    """The two ways of computing them (SQL on PostgreSQL, Python on SQLite)
    over the same random rows: equal, group by group."""
    if connection.vendor != "postgresql":
        pytest.skip("the SQL way runs on PostgreSQL only")
    rng = random.Random(7)
    teams = [team_of("t1"), team_of("t2")]
    for _ in range(60):
        outcome = rng.choice(["approved", "approved", "rejected", "expired", "cancelled"])
        decided(
            round(rng.uniform(1, 5000), 3),
            outcome=outcome,
            team=rng.choice(teams),
            reviewer=rng.choice(["user:1", "user:2", "person:x", ""]),
            actor=rng.choice(["ann", "bob"]),
            actions=rng.sample(["a.one", "a.two", "a.three"], rng.choice([1, 2])),
        )
    for model, fields in (
        (DecisionRecord, [None, "team_id", "reviewer_key"]),
        (DecisionAction, ["action"]),
    ):
        rows = model.objects.all()
        assert analytics._grouped_sql(rows, fields) == analytics._grouped_python(rows, fields)
