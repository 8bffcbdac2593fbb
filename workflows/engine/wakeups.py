"""Wake-ups: asking the workers to look now. The queue carries only a task
path and ids (`workflows.tasks`); the state it points at is in the tables.

On PostgreSQL with the ORM broker (and `Q_LISTEN` on), a wake-up also sends
`NOTIFY durableconsole_wake` in the caller's transaction, and each cluster's
pusher waits on a `LISTEN` connection (`ListeningBroker`) instead of
sleeping `Q_POLL` between looks at the queue: an approval reaches a worker
when it commits, not at the next poll. The queue stays the record of what
to do; a lost notification costs at most one poll interval.
"""

import logging
import os
import time

import psycopg
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.tasks import async_task

from durableconsole import telemetry
from workflows.models import Workflow

log = logging.getLogger(__name__)

CHANNEL = "durableconsole_wake"


def _notifying() -> bool:
    return settings.Q_CLUSTER.get("broker_class") == f"{__name__}.ListeningBroker"


def enqueue(func: str, *args, name: str, **kwargs) -> None:
    """Queue a task from inside a transaction. With the ORM broker on the
    same database it commits or rolls back with the caller's transaction
    (and so does its NOTIFY, which PostgreSQL delivers at commit, once per
    transaction however many wake-ups it sent); with another broker it is
    sent only after the commit. Either way the worker loop's sweep covers a
    wake-up that never arrives."""
    if "orm" in settings.Q_CLUSTER:
        async_task(func, *args, task_name=name, **kwargs)
        if _notifying():
            with connections[settings.Q_CLUSTER["orm"]].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])
    else:
        transaction.on_commit(lambda: async_task(func, *args, task_name=name, **kwargs))


def wake(workflow: Workflow) -> None:
    """Ask the workers to look at this workflow now. With tracing on, the
    wake-up carries the caller's trace context (`trace=`): the worker's
    spans for this workflow continue the trace of the approval."""
    enqueue("workflows.tasks.run_workflow", str(workflow.pk), name=f"run {workflow.pk}", **telemetry.carrier())


class ListeningBroker(ORM):
    """django-q2's ORM broker, woken by NOTIFY. The cluster's pusher (one
    process per cluster) is the only caller of `dequeue`, so a cluster holds
    one LISTEN connection, whatever its number of workers. When that
    connection fails, the broker sleeps `Q_POLL` like the ORM broker and
    connects again at the next empty look."""

    def __init__(self, list_key: str = None):
        super().__init__(list_key=list_key)
        self._listener: psycopg.Connection | None = None
        self._listener_pid: int | None = None
        # Looks at an empty queue that a notification (not the poll
        # interval) ended; the pusher's process logs it at DEBUG.
        self.woken = 0

    def _listen(self) -> psycopg.Connection | None:
        if self._listener is not None and self._listener_pid == os.getpid() and not self._listener.closed:
            return self._listener
        # A broker made before the cluster forked must not share its parent's socket.
        self._listener = None
        try:
            params = connections[Conf.ORM].get_connection_params()
            listener = psycopg.connect(**params, autocommit=True)
            listener.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error:
            log.warning("cannot LISTEN for wake-ups; polling every %s s until it can", Conf.POLL, exc_info=True)
            return None
        self._listener, self._listener_pid = listener, os.getpid()
        return listener

    def _take(self) -> list:
        """What the ORM broker's dequeue takes: up to BULK ready tasks, each
        locked for `retry` seconds by a conditional update."""
        queue = self.get_connection()
        taken = []
        for task in queue.filter(key=self.list_key, lock__lt=timezone.now())[: Conf.BULK]:
            if queue.filter(id=task.id, lock=task.lock).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
        return taken

    def dequeue(self):
        # LISTEN before looking: a wake-up committed between the look and
        # the wait is then waiting in the connection, not lost.
        listener = self._listen()
        if tasks := self._take():
            return tasks
        if listener is None:
            time.sleep(Conf.POLL)
            return None
        try:
            if list(listener.notifies(timeout=Conf.POLL, stop_after=1)):
                self.woken += 1
                log.debug("woken by NOTIFY (%d)", self.woken)
                # Several commits may have notified: one look serves them all.
                list(listener.notifies(timeout=0))
        except psycopg.Error:
            log.warning("the LISTEN connection failed; connecting again", exc_info=True)
            self._listener = None
        return None
