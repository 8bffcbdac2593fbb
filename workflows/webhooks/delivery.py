"""Delivering the outbox, in the workers: at least once, with a stable
`webhook-id`, bounded exponential backoff with jitter, then a dead letter.

A batch is claimed by conditional updates (the row must still carry the
fence it was read with), which push each row's due time one lease ahead:
two workers never send the same row at once, and a worker that dies
mid-call leaves it due again when the lease ends. The HTTP calls run
after the claim committed and with the database connection closed; an
outcome is recorded only while the row still carries the claim's fence.
"""

from __future__ import annotations

import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import requests
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from workflows import queue
from workflows.audit import journal
from workflows.audit.redaction import redact_text
from workflows.errors import WrongState
from workflows.reasons import clean_reason
from workflows.webhooks import keys, outbound
from workflows.webhooks.models import WebhookDelivery

log = logging.getLogger(__name__)

BATCH = 20
CAP_SECONDS = 3600.0
Status = WebhookDelivery.Status


def lease_seconds() -> float:
    """Longer than a call may take (connect, then read), with room to record it."""
    return min(2.0, settings.ACTION_TIMEOUT_SECONDS) + settings.ACTION_TIMEOUT_SECONDS + 5.0


def backoff(failures: int) -> float:
    """Doubling from WEBHOOK_RETRY_SECONDS, capped, with jitter in its upper half
    (a retry never comes much sooner than the schedule says)."""
    ceiling = min(CAP_SECONDS, settings.WEBHOOK_RETRY_SECONDS * 2 ** max(0, failures - 1))
    return random.uniform(ceiling / 2, ceiling)


@dataclass
class Job:
    delivery: WebhookDelivery
    fence: int
    url: str
    body: bytes
    keys: list[bytes]
    status_code: int | None = None
    error: str = ""
    permanent: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def claim(limit: int = BATCH) -> list[Job]:
    now = timezone.now()
    lease_end = now + timedelta(seconds=lease_seconds())
    jobs = []
    for delivery in WebhookDelivery.objects.due(now).select_related("endpoint").order_by("next_attempt_at")[:limit]:
        taken = (
            WebhookDelivery.objects.due(now)
            .filter(pk=delivery.pk, fence=delivery.fence)
            .update(fence=F("fence") + 1, attempts=F("attempts") + 1, next_attempt_at=lease_end)
        )
        if not taken:
            continue
        delivery.fence += 1
        delivery.attempts += 1
        if delivery.endpoint_id:
            signing = keys.live_secrets(endpoint_id=delivery.endpoint_id)
        else:
            signing = keys.live_secrets(user_id=delivery.signer_id)
        jobs.append(Job(delivery, delivery.fence, delivery.target_url, delivery.body.encode(), signing))
    return jobs


def send(job: Job) -> Job:
    """One POST. Touches no database."""
    if not job.keys:
        job.error, job.permanent = "no live signing secret for this receiver", True
        return job
    timestamp = int(time.time())
    webhook_id = job.delivery.webhook_id
    headers = {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": keys.signature(job.keys, webhook_id, timestamp, job.body),
    }
    timeout = (min(2.0, settings.ACTION_TIMEOUT_SECONDS), settings.ACTION_TIMEOUT_SECONDS)
    try:
        response = outbound.send("POST", job.url, headers=headers, data=job.body, timeout=timeout)
    except outbound.AddressRefused as exc:
        job.error, job.permanent = str(exc), True
        return job
    except (outbound.Unresolvable, requests.RequestException) as exc:
        job.error = redact_text(f"{type(exc).__name__}: {exc}")[:500]
        return job
    job.status_code = response.status_code
    if not job.ok:
        kind = "a redirect, not followed" if 300 <= response.status_code < 400 else "not a 2xx"
        job.error = f"HTTP {response.status_code} ({kind}): {redact_text(response.text[:200])}"
    response.close()
    return job


def record(job: Job) -> None:
    now = timezone.now()
    delivery = job.delivery
    mine = WebhookDelivery.objects.filter(pk=delivery.pk, status=Status.PENDING, fence=job.fence)
    if job.ok:
        mine.update(status=Status.DELIVERED, delivered_at=now, last_status_code=job.status_code, last_error="")
        return
    failures = delivery.attempts - delivery.retry_base
    if not job.permanent and failures < settings.WEBHOOK_MAX_ATTEMPTS:
        mine.update(
            next_attempt_at=now + timedelta(seconds=backoff(failures)),
            last_status_code=job.status_code,
            last_error=job.error,
        )
        return
    with transaction.atomic():
        if mine.update(
            status=Status.DEAD, next_attempt_at=None, last_status_code=job.status_code, last_error=job.error
        ):
            journal.append(
                actor="worker",
                verb="webhook.dead_lettered",
                obj_type="webhook_delivery",
                obj_id=delivery.pk,
                workflow_id=delivery.workflow_id,
                data={
                    "event": delivery.event,
                    "webhook_id": delivery.webhook_id,
                    "attempts": failures,
                    "error": job.error,
                },
            )
    log.warning(
        "webhook %s (%s) dead-lettered after %d attempt(s): %s",
        delivery.webhook_id,
        delivery.event,
        failures,
        job.error,
    )


def budget() -> float:
    """How long a delivery task keeps starting batches: at most 30 s, and it
    must return before django-q's task timeout (Q_TIMEOUT) would kill its
    worker mid-call, the last batch's calls taking up to the connect timeout
    plus ACTION_TIMEOUT_SECONDS (as a drain does, docs/deploying.md#remote-effects-in-flight)."""
    timeout = settings.Q_CLUSTER["timeout"]
    call = settings.ACTION_TIMEOUT_SECONDS + min(2.0, settings.ACTION_TIMEOUT_SECONDS)
    return min(30.0, max(timeout / 4, timeout - call - 1))


def deliver_due(budget_seconds: float | None = None) -> int:
    """Deliver what is due, batch after batch, for about `budget_seconds`
    (default `budget()`). Returns the number of rows attempted; what is
    left due is taken by the next task (the worker loop asks `any_due`)."""
    budget_seconds = budget() if budget_seconds is None else budget_seconds
    done = 0
    started = time.monotonic()
    while time.monotonic() - started < budget_seconds:
        jobs = claim()
        if not jobs:
            break
        # The claims are committed; no connection is held across the calls.
        connection.close()
        with ThreadPoolExecutor(max_workers=min(len(jobs), 8)) as pool:
            sent = list(pool.map(send, jobs))
        for job in sent:
            record(job)
        done += len(sent)
    return done


def replay(delivery: WebhookDelivery, *, by, reason: str) -> WebhookDelivery:
    """Send a dead-lettered delivery again, with the same webhook-id and
    body, and a fresh attempt budget."""
    reason = clean_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        if not WebhookDelivery.objects.filter(pk=delivery.pk, status=Status.DEAD).update(
            status=Status.PENDING, retry_base=F("attempts"), next_attempt_at=now
        ):
            raise WrongState("Only a dead-lettered delivery can be replayed.")
        journal.append(
            actor=by,
            verb="webhook.replayed",
            obj_type="webhook_delivery",
            obj_id=delivery.pk,
            workflow_id=delivery.workflow_id,
            data={"event": delivery.event, "webhook_id": delivery.webhook_id, "reason": reason},
        )
        queue.enqueue("workflows.tasks.deliver_webhooks", name="deliver webhooks")
    delivery.refresh_from_db()
    return delivery
