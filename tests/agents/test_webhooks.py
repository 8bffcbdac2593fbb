"""Signed outbound webhooks (docs/explanation/agents.md#webhooks): each event is written to the
outbox with its change, delivered by the workers at least once with a
stable webhook-id and Standard Webhooks signatures, retried, dead-lettered
and replayed; secrets are shown once and stored encrypted."""

import base64
import hashlib
import hmac
import json
import threading
import time

import pytest
from django.db import connection

from tests.support.receiver import Receiver
from tests.support.running import wait_for_status
from tests.support.webhooks import secret_for
from workflows.models import Workflow
from workflows.webhooks import delivery
from workflows.webhooks.models import WebhookDelivery, WebhookSecret

pytestmark = pytest.mark.django_db(transaction=True)


def verify(secret: str, headers: dict, body: bytes) -> bool:
    """The Standard Webhooks check as a receiver writes it from the spec."""
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{body.decode()}".encode()
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = [part.split(",", 1)[1] for part in headers["webhook-signature"].split(" ") if part.startswith("v1,")]
    return any(hmac.compare_digest(expected, candidate) for candidate in offered)


def submit(api, url, key="hooked"):
    answer = api["agent"].post(
        "/workflows",
        {
            "name": "Hooked plan",
            "submission_key": key,
            "callback_url": url,
            "steps": [{"key": "one", "action": "noop", "args": {}}],
        },
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()["id"]


def deliver_until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        delivery.deliver_due()
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("the deliveries never got there")


def test_a_callback_is_signed_as_standard_webhooks_says_and_carries_the_workflow(api):
    secret = secret_for("agent")
    with Receiver() as receiver:
        workflow_id = submit(api, receiver.url)
        assert api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "not today"}).status_code == 200
        deliver_until(lambda: receiver.processed)
    [request] = receiver.requests
    headers, body = request["headers"], request["body"]
    assert verify(secret, headers, body)
    assert not verify(secret_for("reviewer"), headers, body)
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    event = json.loads(body)
    assert event["type"] == "workflow.rejected"
    shown = api["agent"].get(f"/workflows/{workflow_id}").json()
    assert event["data"]["workflow"].keys() == shown.keys()
    assert event["data"]["workflow"]["status"] == "REJECTED" == shown["status"]
    assert secret not in body.decode() and "/review" not in body.decode() and "http" not in body.decode()
    assert headers["webhook-id"] == WebhookDelivery.objects.get().webhook_id


def test_a_5xx_is_retried_with_the_same_webhook_id_until_it_succeeds(api, settings):
    settings.WEBHOOK_RETRY_SECONDS = 0.05
    secret_for("agent")
    with Receiver(statuses=[500, 503]) as receiver:
        workflow_id = submit(api, receiver.url)
        api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        deliver_until(lambda: receiver.processed)
    assert [r["headers"]["webhook-id"] for r in receiver.requests] == [
        receiver.requests[0]["headers"]["webhook-id"]
    ] * 3
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_status_code) == ("DELIVERED", 3, 200)


def test_a_delivery_task_returns_before_the_task_timeout_would_kill_its_worker_mid_call(api, settings):
    """With Q_TIMEOUT 6 s and calls of up to 5 s, a task starts no batch
    after its first: django-q would otherwise kill the worker mid-call
    (what the chaos soak's short timeouts showed). The rest is left due."""
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 6}
    settings.ACTION_TIMEOUT_SECONDS = 3
    secret_for("agent")
    with Receiver(on_arrival=lambda body: time.sleep(1.0)) as receiver:
        workflow_id = submit(api, receiver.url)
        api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        row = WebhookDelivery.objects.get()
        WebhookDelivery.objects.bulk_create(
            [
                WebhookDelivery(
                    event=row.event,
                    workflow_id=row.workflow_id,
                    url=row.url,
                    signer_id=row.signer_id,
                    body=row.body,
                    next_attempt_at=row.next_attempt_at,
                )
                for _ in range(2 * delivery.BATCH - 1)
            ]
        )
        sent = delivery.deliver_due()
    assert sent == delivery.BATCH
    assert WebhookDelivery.objects.filter(status="PENDING").count() == delivery.BATCH


def test_an_endpoint_down_for_good_dead_letters_and_a_replay_keeps_the_webhook_id(api, settings):
    settings.WEBHOOK_RETRY_SECONDS = 0.05
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    with Receiver(default=503) as receiver:
        created = api["operator"].post("/webhooks", {"url": receiver.url, "description": "ops"})
        assert created.status_code == 201
        secret = created.json()["secret"]
        assert secret.startswith("whsec_")
        assert "secret" not in api["operator"].get(f"/webhooks/{created.json()['id']}").json()
        assert api["agent"].post("/webhooks", {"url": receiver.url}).status_code == 403
        workflow_id = (
            api["agent"]
            .post(
                "/workflows",
                {"name": "No callback", "submission_key": "k", "steps": [{"key": "one", "action": "noop", "args": {}}]},
            )
            .json()["id"]
        )
        api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        deliver_until(lambda: WebhookDelivery.objects.filter(status="DEAD").exists())
        assert len(receiver.requests) == 3
        dead = api["auditor"].get("/webhook-deliveries", status="DEAD").json()["items"]
        assert [(d["event"], d["attempts"], d["last_status_code"]) for d in dead] == [("workflow.rejected", 3, 503)]
        assert api["auditor"].post(f"/webhook-deliveries/{dead[0]['id']}/replay", {"reason": "up"}).status_code == 403
        receiver.default = 200
        replayed = api["operator"].post(f"/webhook-deliveries/{dead[0]['id']}/replay", {"reason": "endpoint is back"})
        assert replayed.status_code == 202 and replayed.json()["status"] == "PENDING"
        deliver_until(lambda: receiver.processed)
    ids = {r["headers"]["webhook-id"] for r in receiver.requests}
    assert ids == {dead[0]["webhook_id"]} and len(receiver.requests) == 4
    assert verify(secret, receiver.requests[-1]["headers"], receiver.requests[-1]["body"])
    assert WebhookDelivery.objects.get().status == "DELIVERED"


def test_during_a_rotation_both_secrets_sign_then_only_the_new_one(api, settings):
    old = secret_for("agent")
    new = secret_for("agent", "--rotate")
    assert new != old
    with Receiver() as receiver:
        workflow_id = submit(api, receiver.url)
        api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        deliver_until(lambda: receiver.processed)
        first = receiver.requests[0]
        assert len(first["headers"]["webhook-signature"].split(" ")) == 2
        assert verify(old, first["headers"], first["body"]) and verify(new, first["headers"], first["body"])

        settings.WEBHOOK_ROTATION_HOURS = 0
        newest = secret_for("agent", "--rotate")
        second_id = submit(api, receiver.url, key="second")
        api["reviewer"].post(f"/workflows/{second_id}/reject", {"comment": "no"})
        deliver_until(lambda: len(receiver.processed) == 2)
    last = receiver.requests[-1]
    assert len(last["headers"]["webhook-signature"].split(" ")) == 1
    assert verify(newest, last["headers"], last["body"]) and not verify(new, last["headers"], last["body"])


def test_signing_secrets_never_reach_the_database_in_plain_text(api):
    user_secret = secret_for("agent")
    endpoint_secret = api["operator"].post("/webhooks", {"url": "https://hooks.example.com/in"}).json()["secret"]
    assert WebhookSecret.objects.count() == 2
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM workflows_webhooksecret")
        secrets_table = repr(cursor.fetchall())
        cursor.execute("SELECT data FROM workflows_auditevent")
        audit = repr(cursor.fetchall())
    for secret in (user_secret, endpoint_secret):
        raw_key = secret.removeprefix("whsec_")
        assert raw_key not in secrets_table and raw_key not in audit
        assert base64.b64decode(raw_key).hex() not in secrets_table


def test_a_callback_url_is_refused_unless_https_or_loopback_and_signed(api):
    plan = {"name": "p", "submission_key": "k", "steps": [{"key": "one", "action": "noop", "args": {}}]}
    no_secret = api["agent"].post("/workflows", {**plan, "callback_url": "https://hooks.example.com/in"})
    assert no_secret.status_code == 400 and "webhook_secret" in no_secret.json()["error"]["fields"]["callback_url"]
    secret_for("agent")
    for url in ("http://hooks.example.com/in", "ftp://hooks.example.com", "https://user:pw@hooks.example.com/"):
        answer = api["agent"].post("/workflows", {**plan, "callback_url": url})
        assert answer.status_code == 400, url
        assert "callback_url" in answer.json()["error"]["fields"]
    assert not Workflow.objects.exists()
    assert api["agent"].post("/workflows", {**plan, "callback_url": "https://hooks.example.com/in"}).status_code == 201
    again = api["agent"].post("/workflows", {**plan, "callback_url": "https://other.example.com/in"})
    assert again.status_code == 409
    assert Workflow.objects.get().callback_url == "https://hooks.example.com/in"


def test_events_are_written_with_their_change_and_not_without_it(api):
    secret_for("agent")
    workflow_id = submit(api, "https://hooks.example.com/in")
    assert not WebhookDelivery.objects.exists()
    assert api["agent"].post(f"/workflows/{workflow_id}/reject", {"comment": "self"}).status_code == 403
    assert not WebhookDelivery.objects.exists()
    api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
    assert list(WebhookDelivery.objects.values_list("event", flat=True)) == ["workflow.rejected"]


def test_a_worker_killed_mid_delivery_delivers_again_with_the_same_id(api, start_worker):
    secret_for("agent")
    hold = threading.Event()
    with Receiver(hold_first=hold) as receiver:
        workflow_id = submit(api, receiver.url)
        api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        env = {"ACTION_TIMEOUT_SECONDS": "3", "WORKER_TICK_SECONDS": "0.2"}
        worker = start_worker("doomed", **env)
        assert receiver.arrived.wait(30), "the worker never called"
        worker.kill()
        assert not worker.alive
        assert not receiver.processed and len(receiver.requests) == 1
        start_worker("survivor", **env)
        deadline = time.monotonic() + 40
        while not receiver.processed and time.monotonic() < deadline:
            time.sleep(0.2)
    assert len(receiver.requests) == 2
    first, second = (r["headers"]["webhook-id"] for r in receiver.requests)
    assert first == second and list(receiver.processed) == [first]
    # The receiver answered; the survivor records the delivery after it.
    while WebhookDelivery.objects.get().status != "DELIVERED" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert WebhookDelivery.objects.get().status == "DELIVERED"
    assert wait_for_status(workflow_id, "REJECTED")
