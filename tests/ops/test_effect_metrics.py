"""/metrics exports effects in flight, rate-limited waits and a latency
histogram of attempts per action; the dashboard shows effects in flight
beside each action's limits."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.running import run_until
from workflows.models import Attempt, Step
from workflows.operations import plans
from workflows.states import StepStatus


def plan(key, *steps):
    return {
        "name": key,
        "submission_key": key,
        "steps": [{"key": f"s{n}", "action": action, "args": args} for n, (action, args) in enumerate(steps)],
    }


def approved(people, body):
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer"])
    return workflow


def scrape(client) -> list[str]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode().splitlines()


@pytest.fixture
def finished(people, desk):
    """Two noop steps and a ticket.create, run to COMPLETE by the engine."""
    workflow = approved(
        people, plan("done", ("noop", {}), ("noop", {}), ("ticket.create", {"title": "t", "body": "b"}))
    )
    run_until(workflow.pk, "COMPLETE")
    return workflow


def test_histogram_counts_each_finished_attempt_in_its_buckets(finished, client):
    now = timezone.now()
    # Durations the test can place in buckets: 3 ms, 40 ms and 2 s.
    for step, ms in zip(finished.steps.order_by("position"), (3, 40, 2000), strict=True):
        Attempt.objects.filter(step=step).update(started_at=now - timedelta(milliseconds=ms), finished_at=now)
    lines = scrape(client)
    name = "durableconsole_effect_duration_seconds"
    assert f"# TYPE {name} histogram" in lines
    assert f'{name}_bucket{{action="noop",le="0.005"}} 1' in lines
    assert f'{name}_bucket{{action="noop",le="0.025"}} 1' in lines
    assert f'{name}_bucket{{action="noop",le="0.05"}} 2' in lines
    assert f'{name}_bucket{{action="noop",le="+Inf"}} 2' in lines
    assert f'{name}_count{{action="noop"}} 2' in lines
    assert f'{name}_sum{{action="noop"}} 0.043' in lines
    assert f'{name}_bucket{{action="ticket.create",le="1"}} 0' in lines
    assert f'{name}_bucket{{action="ticket.create",le="2.5"}} 1' in lines
    assert f'{name}_count{{action="ticket.create"}} 1' in lines


def test_histogram_leaves_out_attempts_finished_over_an_hour_ago(finished, client):
    long_ago = timezone.now() - timedelta(hours=2)
    Attempt.objects.filter(step__workflow=finished, step__action="noop").update(
        started_at=long_ago - timedelta(seconds=1), finished_at=long_ago
    )
    text = "\n".join(scrape(client))
    assert 'action="noop"' not in text
    assert 'durableconsole_effect_duration_seconds_count{action="ticket.create"} 1' in text


def test_rate_limited_waits_count_steps_waiting_after_a_429(people, desk, client):
    desk.fault(mode="rate_limit", retry_after=60, count=5)
    workflow = approved(people, plan("limited", ("ticket.create", {"title": "t", "body": "b"})))
    run_until(workflow.pk, "RUNNING", timeout=10)
    step = workflow.steps.get()
    assert step.status == StepStatus.WAITING_RETRY and step.failure_class == "RATE_LIMITED"
    assert len(desk.ledger()) == 0 and desk.faults()[0]["count"] == 4  # the 429 was answered
    lines = scrape(client)
    assert "# TYPE durableconsole_rate_limited_waits gauge" in lines
    assert 'durableconsole_rate_limited_waits{action="ticket.create"} 1' in lines


def test_effects_in_flight_per_action_in_metrics_and_on_the_dashboard(people, client):
    from workflows.operations import policies

    policies.change("ticket.create", by=people["operator"], reason="slow remote", changes={"max_in_flight": 4})
    running = approved(people, plan("running", ("noop", {}), ("ticket.create", {"title": "t", "body": "b"})))
    # Two steps held RUNNING, as a worker's claim leaves them while their effects are in flight.
    Step.objects.filter(workflow=running).update(status=StepStatus.RUNNING)
    lines = scrape(client)
    assert "# TYPE durableconsole_effects_in_flight gauge" in lines
    assert 'durableconsole_effects_in_flight{action="noop"} 1' in lines
    assert 'durableconsole_effects_in_flight{action="ticket.create"} 1' in lines

    assert client.login(username="operator", password=PASSWORD)
    html = client.get("/dashboard/").content.decode()
    assert "Effects in flight" in html
    rows = dict(re.findall(r'<tr data-action="([^"]+)">(.*?)</tr>', html, flags=re.S))
    assert set(rows) == {"noop", "ticket.create"}
    assert re.search(r'data-testid="in-flight">1<.*data-testid="limit">4<', rows["ticket.create"], flags=re.S)
    assert re.search(r'data-testid="in-flight">1<.*data-testid="limit">unlimited<', rows["noop"], flags=re.S)
