"""The whole path over HTTP, with a real qcluster and a real ticket desk."""

import time

import pytest
from django_q.models import OrmQ
from django_q.tasks import async_task

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from tests.support.running import wait_for_status
from workflows.models import Attempt

pytestmark = pytest.mark.live


def _wait_http(http, workflow_id, status, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = http.get(f"/workflows/{workflow_id}").json()
        if body["status"] == status:
            return body
        time.sleep(0.2)
    raise AssertionError(f"workflow stayed {body['status']}: {body}")


def test_submit_approve_and_run_to_complete_over_http(http_api, start_worker, desk):
    start_worker()
    submitted = http_api["agent"].post("/workflows", ticket_plan())
    assert submitted.status_code == 201
    workflow_id = submitted.json()["id"]

    refused = http_api["agent"].post(f"/workflows/{workflow_id}/approve", {"comment": "me"})
    assert refused.status_code == 403

    approved = http_api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "go"})
    assert approved.status_code == 200

    body = _wait_http(http_api["agent"], workflow_id, "COMPLETE")
    assert [s["status"] for s in body["steps"]] == ["COMPLETE"] * 3
    assert all(len(s["attempts"]) == 1 and s["attempts"][0]["status"] == "SUCCEEDED" for s in body["steps"])

    operation_keys = [s["operation_key"] for s in body["steps"]]
    ledger_keys = [entry["idempotency_key"] for entry in desk.ledger()]
    assert sorted(ledger_keys) == sorted(operation_keys)  # exactly one effect per operation
    tickets = desk.tickets()
    assert len(tickets) == 1
    assert tickets[0]["idempotency_key"] == operation_keys[0]
    assert tickets[0]["status"] == "closed"
    assert len(tickets[0]["comments"]) == 1
    assert body["steps"][0]["external_ref"] == f"ticket:{tickets[0]['id']}"


def test_duplicated_deliveries_to_real_workers_cause_one_effect(people, start_worker, desk):
    from workflows.operations import plans

    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    queued = OrmQ.objects.count()
    decide.approve(workflow, by=people["reviewer"])  # enqueues one wake-up
    for _ in range(3):  # the broker redelivers, a client retries, a sweep fires
        async_task("workflows.tasks.run_workflow", str(workflow.pk))
    assert OrmQ.objects.count() == queued + 4
    start_worker()
    wait_for_status(workflow.pk, "COMPLETE")
    deadline = time.monotonic() + 20
    while OrmQ.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not OrmQ.objects.exists(), "every delivery was processed"
    keys = [entry["idempotency_key"] for entry in desk.ledger()]
    assert len(keys) == 3 and len(set(keys)) == 3
    assert Attempt.objects.filter(step__workflow=workflow).count() == 3


def test_a_worker_on_the_redis_broker_runs_the_plan_too(people, start_worker, desk, redis_url):
    """The queue only says "look now": a cluster on Redis never sees the ORM
    wake-up this test process queued, and still finishes the work it finds
    in the database."""
    import uuid

    from workflows.operations import plans

    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    decide.approve(workflow, by=people["reviewer"])
    wake_ups = list(OrmQ.objects.values_list("pk", flat=True))
    assert wake_ups
    start_worker(Q_BROKER="redis", REDIS_URL=redis_url, Q_CLUSTER_NAME=f"test-{uuid.uuid4().hex[:8]}")
    wait_for_status(workflow.pk, "COMPLETE")
    assert len(desk.tickets()) == 1
    # An ORM-broker cluster would have taken the wake-up; this one never read that queue.
    assert list(OrmQ.objects.values_list("pk", flat=True)) == wake_ups
