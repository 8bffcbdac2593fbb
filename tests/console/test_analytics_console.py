"""The analytics page and its CSV (docs/guides/analytics.md): the API's
numbers for the same filters, only the caller's teams, a CSV that matches
the JSON and that no spreadsheet runs as a formula."""

import csv
import io

from django.contrib.auth.models import Group, User
from django.test import Client

from tests.support.analytics import decided, team_of
from tests.support.personas import PASSWORD
from workflows import roles
from workflows.models import Team
from workflows.operations import analytics
from workflows.web.views.analytics import duration


def signed_in(user):
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_the_numbers_and_links_its_csv(people):
    decided(10)
    decided(20, outcome="rejected")
    decided(300)
    page = signed_in(people["reviewer"]).get("/analytics/", {"since": "7d"})
    assert page.status_code == 200
    html = page.content.decode()
    assert '<dd data-testid="p50">20 s</dd>' in html and '<dd data-testid="max">5 min</dd>' in html
    assert 'href="/analytics/decisions.csv?since=7d&amp;team=&amp;action="' in html
    assert "<meter" in html and "<script" not in html.split("</head>")[1]
    # Linked from the navigation for reviewers and auditors, not for operators.
    assert 'href="/analytics/"' in signed_in(people["auditor"]).get("/").content.decode()
    assert 'href="/analytics/"' not in signed_in(people["operator"]).get("/").content.decode()
    assert signed_in(people["operator"]).get("/analytics/").status_code == 403


def test_bad_filters_show_their_errors_with_400(people):
    page = signed_in(people["reviewer"]).get("/analytics/", {"since": "soon", "team": "nope"})
    assert page.status_code == 400
    html = page.content.decode()
    assert 'id="since-error"' in html and "Not one of your teams." in html
    assert signed_in(people["reviewer"]).get("/analytics/decisions.csv", {"since": "soon"}).status_code == 400


def test_the_team_choices_are_the_callers_own(people):
    auditor = User.objects.create_user("red-auditor", password=PASSWORD)
    auditor.groups.add(Group.objects.get(name=roles.AUDITORS))
    team_of("red", auditor)
    team_of("blue")
    html = signed_in(auditor).get("/analytics/").content.decode()
    assert '<option value="red"' in html and '<option value="blue"' not in html


def test_the_csv_matches_the_json_and_runs_no_formula(people):
    # A team's name is a slug: it cannot start with a formula's sign; names of actions and people can.
    hostile = team_of("eq-team", people["reviewer"])
    people["reviewer"].teams.add(Team.objects.get(name=Team.DEFAULT))
    decided(10, team=hostile, actor="=HYPERLINK(1)", reviewer="user:9", actions=("+cmd", "noop"))
    decided(40, outcome="rejected", actor="@sum", reviewer="user:8")
    decided(100, outcome="expired")
    # What the API answers for the same person over the same teams (a token would narrow it to one).
    reviewer = User.objects.get(pk=people["reviewer"].pk)
    answer = analytics.decisions(reviewer, analytics.parse(reviewer, since=None, team=None, action=None))
    response = signed_in(people["reviewer"]).get("/analytics/decisions.csv")
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert tuple(rows[0]) == analytics.CSV_COLUMNS
    expected = [[("" if value is None else str(value)) for value in row] for row in analytics.csv_rows(answer)]
    cells = [[cell.removeprefix("'") for cell in row] for row in rows[1:]]
    assert cells == expected
    every = [cell for row in rows[1:] for cell in row]
    assert not [cell for cell in every if cell[:1] in ("=", "+", "-", "@")]
    assert "'=HYPERLINK(1)" in every and "'+cmd" in every and "'@sum" in every
    total = rows[1]
    assert total[:4] == ["all", "", "", "2"] and total[-3:] == ["25.0", "38.5", "40.0"]


def test_durations_read_as_people_say_them():
    assert [duration(value) for value in (None, 0.25, 20, 272, 3600, 7500, 86400 * 3 + 3600 * 4 + 5)] == [
        "—",
        "0.25 s",
        "20 s",
        "4 min 32 s",
        "1 h",
        "2 h 5 min",
        "3 d 4 h",
    ]
