"""The worker's own loop, beside the django-q2 cluster.

django-q2's scheduler ticks about every 30 s, too coarse to notice a retry
that is due or a lease that expired. This loop runs in the cluster's main
process (after the cluster forked its workers) and, every tick, recovers
expired leases and asks the cluster to drain when work is due (and to
deliver webhooks when some are due); and, every
AUDIT_CHECKPOINT_MINUTES, writes a signed audit checkpoint unless another
worker already did. It never performs an effect itself.
"""

import logging
import multiprocessing
import os
import time
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.utils import DatabaseError
from django.utils import timezone
from django_q.signals import pre_execute

from workflows import db, queue
from workflows.audit import checkpoints
from workflows.chat import marks as chat
from workflows.engine import execution, expiry, jobs, previews, recovery
from workflows.models import ChatMessage, Delegation, ReviewNotice, StandingGrant, Step, WebhookDelivery
from workflows.states import StepStatus

log = logging.getLogger(__name__)

# When a worker of this cluster last took a task off each lane's queue:
# shared memory made at import, before the cluster forks, so every worker
# process of the cluster writes to the same place.
_last_pickup = {lane: multiprocessing.RawValue("d", 0.0) for lane in (queue.STEPS, queue.MESSAGES)}


def _task_taken(task, **kwargs) -> None:
    _last_pickup[queue.lane_of(str(task.get("func", "")))].value = time.time()


pre_execute.connect(_task_taken, dispatch_uid="workflows.engine.worker.task_taken")


class StallWatch:
    """Tells a cluster that looks alive but takes no work. A worker killed
    while it waited on the cluster's task queue dies holding the queue's lock,
    and every other worker then blocks on it for good (docs/explanation/architecture.md#the-queue), while
    this loop keeps ticking. Work due for longer than any task may run, with
    no task taken meanwhile, means the cluster is wedged."""

    def __init__(self, limit: float, lane: str = queue.STEPS):
        self.limit, self.lane = limit, lane
        self.due_since: float | None = None
        self.stalled = False

    def check(self, due: bool, now: float) -> bool:
        self.due_since = (self.due_since or now) if due else None
        stalled = due and now - max(self.due_since, _last_pickup[self.lane].value) > self.limit
        if stalled and not self.stalled:
            log.error(
                "no worker of the %s lane took a task for %.0f s while work was due: the cluster is wedged; "
                "withholding the heartbeat so that the supervisor restarts the process group",
                self.lane,
                self.limit,
            )
        self.stalled = stalled
        return stalled


def work_is_due() -> bool:
    return (
        execution.any_due() or Step.objects.filter(status=StepStatus.VERIFYING, lease_expires_at__isnull=True).exists()
    )


# The tasks the worker loop's sweep queues when their work is due, and
# their names in the queue.
SWEPT = {
    "workflows.tasks.deliver_webhooks": "deliver webhooks",
    chat.TASK: "chat messages",
    "workflows.tasks.send_review_notices": "review notices",
    previews.TASK: "previews",
    "workflows.tasks.end_lapsed_delegations": "lapsed delegations",
    "workflows.tasks.expire_lapsed_grants": "lapsed grants",
}


def tick(brokers: dict) -> bool:
    """Expire overdue plans, recover expired leases and wake the cluster's
    lanes (`queue.brokers()`); True when work is due."""
    expiry.expire_overdue()
    recovered = recovery.recover_expired_leases()
    if recovered:
        log.info("recovered %d step(s) whose worker lease expired", recovered)
    if jobs.kick_stalled():
        log.info("queued again the batch of a bulk job that stalled")
    due = work_is_due()
    if due:
        wanted = settings.Q_CLUSTER["workers"] - queue.drains_queued(brokers[queue.STEPS])
        for _ in range(max(0, wanted)):
            queue.send("workflows.tasks.drain", name="drain", brokers=brokers)
    # Work with no wake-up of its own, found by one statement (`SWEPT`).
    # A webhook delivery whose retry came due, or whose worker died mid-call
    # (its lease ended); a chat message whose Retry-After or back-off ended,
    # or whose sender died; reminders and escalations before a plan's review
    # deadline (sent once, whichever cluster's task takes each first);
    # previews whose wake-up was lost or whose worker died mid-read (its
    # claim lapsed); a delegation or a standing grant whose time passed (over
    # already, as reads check `until`: closing it records when, audited).
    found = db.exist(
        {
            "workflows.tasks.deliver_webhooks": WebhookDelivery.objects.due(),
            chat.TASK: ChatMessage.objects.due() if chat.enabled() else None,
            "workflows.tasks.send_review_notices": ReviewNotice.objects.filter(
                sent_at__isnull=True, due_at__lte=timezone.now()
            ),
            previews.TASK: previews.due(),
            "workflows.tasks.end_lapsed_delegations": Delegation.objects.lapsed(),
            "workflows.tasks.expire_lapsed_grants": StandingGrant.objects.lapsed(),
        }
    )
    for func, name in SWEPT.items():
        if found[func] and _room(func, brokers):
            queue.send(func, name=name, brokers=brokers)
    return due


def _room(func: str, brokers: dict) -> bool:
    """Whether the lane of `func` has fewer tasks queued than workers: a
    sweep's wake-up on a longer queue would only wait behind the others."""
    lane = queue.lane_of(func)
    return brokers[lane].queue_size() < queue.workers(lane)


def heartbeat() -> None:
    """Touch the liveness file a supervisor watches (WORKER_HEARTBEAT_FILE):
    a stale file means this loop stopped, or the cluster's workers stopped
    taking work, and the process group should be restarted."""
    path = os.environ.get("WORKER_HEARTBEAT_FILE")
    if path:
        Path(path).write_text(f"{os.getpid()} {time.time():.3f}\n")


def checkpoint() -> float:
    """Write the audit checkpoint if due; seconds until the next look. A
    checkpoint that cannot be signed must not stop recovery: it is logged
    and tried again a minute later."""
    try:
        return checkpoints.write_if_due()
    except DatabaseError:
        raise
    except Exception:
        log.exception("writing the audit checkpoint failed; trying again in a minute")
        return 60.0


def loop(should_run) -> None:
    brokers = queue.brokers()
    interval = settings.WORKER_TICK_SECONDS
    # A task runs at most `timeout` seconds before django-q replaces its worker.
    watch = StallWatch(settings.Q_CLUSTER["timeout"] + 5)
    # The messages lane is wedged when a task waits ready on it and none is taken.
    watch_messages = StallWatch(settings.Q_CLUSTER["timeout"] + 5, queue.MESSAGES)
    next_checkpoint = 0.0
    while should_run():
        try:
            now = time.time()
            steps_stalled = watch.check(tick(brokers), now)
            if not watch_messages.check(brokers[queue.MESSAGES].queue_size() > 0, now) and not steps_stalled:
                heartbeat()
            if time.time() >= next_checkpoint:
                next_checkpoint = time.time() + checkpoint()
        except DatabaseError:
            # A dropped connection (server restart, terminated backend) must not
            # stop recovery: drop it and try again on the next tick.
            log.exception("worker tick failed; reconnecting")
            connection.close()
        close_old_connections()
        _pause(interval, should_run)


def _pause(seconds: float, should_run) -> None:
    """Sleep until the next tick, looking every quarter second whether to
    stop: a signal ends the loop at once, not after a long tick interval
    (a sleep resumes after a signal's handler has run)."""
    until = time.monotonic() + seconds
    while should_run() and (left := until - time.monotonic()) > 0:
        time.sleep(min(left, 0.25))
