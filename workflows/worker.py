"""The worker's own loop, beside the django-q2 cluster.

django-q2's scheduler ticks about every 30 s, too coarse to notice a retry
that is due or a lease that expired. This loop runs in the cluster's main
process (after the cluster forked its workers) and, every tick, recovers
expired leases and asks the cluster to drain when work is due. It never
performs an effect itself.
"""

import logging
import os
import time
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.utils import DatabaseError
from django_q.brokers import get_broker
from django_q.tasks import async_task

from workflows import execution
from workflows.models import Step
from workflows.states import StepStatus

log = logging.getLogger(__name__)


def work_is_due() -> bool:
    return (
        execution._due_steps().exists()
        or Step.objects.filter(status=StepStatus.VERIFYING, lease_expires_at__isnull=True).exists()
    )


def tick(broker) -> None:
    recovered = execution.recover_expired_leases()
    if recovered:
        log.info("recovered %d step(s) whose worker lease expired", recovered)
    if work_is_due():
        wanted = settings.Q_CLUSTER["workers"] - broker.queue_size()
        for _ in range(max(0, wanted)):
            async_task("workflows.tasks.drain", task_name="drain", broker=broker)


def heartbeat() -> None:
    """Touch the liveness file a supervisor watches (WORKER_HEARTBEAT_FILE):
    a stale file means this loop stopped and the process group should be restarted."""
    path = os.environ.get("WORKER_HEARTBEAT_FILE")
    if path:
        Path(path).write_text(f"{os.getpid()} {time.time():.3f}\n")


def loop(should_run) -> None:
    broker = get_broker()
    interval = settings.WORKER_TICK_SECONDS
    while should_run():
        try:
            tick(broker)
            heartbeat()
        except DatabaseError:
            # A dropped connection (server restart, terminated backend) must not
            # stop recovery: drop it and try again on the next tick.
            log.exception("worker tick failed; reconnecting")
            connection.close()
        close_old_connections()
        time.sleep(interval)
