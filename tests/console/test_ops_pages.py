"""Operators see what needs attention; everyone with a role sees the dashboard."""

import re

import pytest

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.running import run_until
from workflows.operations import compensation, plans

BAD = {
    "name": "note on a missing ticket",
    "submission_key": "bad",
    "steps": [
        {"key": "ok", "action": "ticket.create", "args": {"title": "fine", "body": "b"}},
        {"key": "find", "action": "noop", "args": {"ticket": 4040404}},
        {
            "key": "note",
            "action": "ticket.comment",
            "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "<script>x()</script>"},
        },
    ],
}


def login(client, who):
    assert client.login(username=who, password=PASSWORD)
    return client


@pytest.fixture
def troubled(people, desk):
    workflow = plans.submit(people["agent"], BAD).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "FAILED")
    comp = compensation.request(workflow, by=people["operator"], reason="undo the ticket")
    return workflow, comp


def test_attention_board_counts_and_lists_what_needs_an_operator(troubled, client):
    workflow, comp = troubled
    page = login(client, "operator").get("/attention/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="count-dead-letters">1<' in html
    assert 'data-testid="count-compensations">1<' in html
    assert 'data-testid="count-in-doubt">0<' in html
    assert f"/compensations/{comp.pk}/" in html


def test_attention_board_refreshes_as_a_partial(troubled, client):
    page = login(client, "operator").get("/attention/", HTTP_HX_REQUEST="true")
    assert b"<html" not in page.content and b"count-dead-letters" in page.content


@pytest.mark.parametrize("who, status", [("reviewer", 403), ("auditor", 403), ("agent", 403), ("admin", 200)])
def test_attention_board_is_for_operators(people, client, who, status):
    assert login(client, who).get("/attention/").status_code == status


def test_dashboard_charts_steps_failures_and_dead_letter_age(troubled, client):
    page = login(client, "auditor").get("/dashboard/")
    assert page.status_code == 200
    html = page.content.decode()

    def row(label):  # a labelled chart's row: its label, a meter and the count
        found = re.search(
            rf'<th scope="row">{re.escape(label)}</th>\s*<td class="bar"><meter[^>]*value="(\d+)"'
            rf'[^>]*>\d+</meter></td>\s*<td class="count">(\d+)</td>',
            html,
        )
        return found and found.groups()

    assert row("INVALID_ARGUMENTS") == ("1", "1")  # the failed attempt, by class
    assert row("&lt; 5 min") == ("1", "1")  # the fresh dead letter, by age
    assert html.count("<svg") == 1  # steps per minute; the labelled charts are tables


def test_dashboard_needs_a_role(people, client):
    assert login(client, "agent").get("/dashboard/").status_code == 403
    assert client.logout() is None and client.get("/dashboard/").status_code == 302


def test_counts_are_capped_not_table_scans(troubled, client, django_assert_max_num_queries):
    login(client, "operator")
    with django_assert_max_num_queries(20):
        client.get("/attention/")


def test_metrics_are_prometheus_text(troubled, client):
    response = client.get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'durable_workflows{status="FAILED"} 1' in text
    assert "durable_dead_letters_open 1" in text
    assert "# TYPE durable_dead_letter_oldest_age_seconds gauge" in text


def test_metrics_can_require_a_token(db, client, settings):
    settings.METRICS_TOKEN = "scrape-me"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200
