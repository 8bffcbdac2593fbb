"""The task queue: asking the workers to look now (`enqueue`, `wake`), and
the brokers that hand the tasks out. The queue carries only a task path and
ids (`workflows.tasks`); the state it points at is in the tables.

Lanes (docs/explanation/architecture.md#queue-lanes). A cluster serves two
queues, each with workers of its own: the steps lane (the drains of due
steps, bulk jobs: `Q_WORKERS` workers) and the messages lane (reviewers'
notices, previews, webhook and chat deliveries: `Q_MESSAGE_WORKERS`
workers). Under a backlog every step worker spends its whole claiming
budget inside a drain, so a notice queued behind the drains waited for one
to end; on its own lane it is taken as soon as it is queued, whatever the
backlog. A lane is a django-q2 queue (its list key: the cluster's name, and
`<name>.<lane>` for the messages lane), served by a django-q2 cluster of its
own that `qcluster` starts beside the steps' (its own sentinel, pusher,
monitor and workers). django-q2 has no priorities or reserved workers: its
pusher hands tasks to whichever worker is free, and a free worker is what
a backlog of drains leaves none of; a second queue with its own workers is
the one thing in django-q2 that gives a task a worker regardless. Which
lane a task takes is `LANES`, by the task's path: adding a task to the
messages lane is one line there.

On PostgreSQL with the ORM broker (and `Q_LISTEN` on), a wake-up also sends
a NOTIFY on its lane's channel (`channel`), by the statement that queues it
(so in the caller's transaction), and
each lane's pusher waits on a `LISTEN` connection (`ListeningBroker`)
instead of sleeping `Q_POLL` between looks at its queue: an approval reaches
a worker when it commits, not at the next poll. The queue stays the record
of what to do; a lost notification costs at most one poll interval.
"""

import logging
import os
import time
from datetime import timedelta

import psycopg
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from workflows import telemetry
from workflows.db import listen_params
from workflows.models import Workflow

log = logging.getLogger(__name__)

CHANNEL = "durableconsole_wake"

STEPS, MESSAGES = "steps", "messages"
# Which lane each task takes, by its path; a task not listed takes the steps
# lane. Only tasks that are short and never run due steps belong on the
# messages lane: its few workers must stay free for the next notice.
LANES = {
    "workflows.tasks.notify_reviewers": MESSAGES,
    "workflows.tasks.send_review_notices": MESSAGES,
    "workflows.tasks.end_lapsed_delegations": MESSAGES,
    "workflows.tasks.expire_lapsed_grants": MESSAGES,
    "workflows.tasks.compute_previews": MESSAGES,
    "workflows.tasks.compute_due_previews": MESSAGES,
    "workflows.tasks.deliver_webhooks": MESSAGES,
    "workflows.tasks.send_chat": MESSAGES,
    "workflows.tasks.decide_slack_click": MESSAGES,
}


def lane_of(func: str) -> str:
    return LANES.get(func, STEPS)


def lane_key(lane: str) -> str:
    """The queue (django-q2 list key) of a lane of this cluster. The steps
    lane keeps the cluster's own key: tasks queued before lanes existed are
    still served there, whatever their lane now."""
    return Conf.CLUSTER_NAME if lane == STEPS else f"{Conf.CLUSTER_NAME}.{lane}"


def channel(lane: str) -> str:
    """The NOTIFY channel that wakes a lane's pusher."""
    return CHANNEL if lane == STEPS else f"{CHANNEL}_{lane}"


def workers(lane: str) -> int:
    """How many workers serve a lane in each cluster."""
    return settings.Q_CLUSTER["workers"] if lane == STEPS else settings.Q_MESSAGE_WORKERS


def brokers() -> dict[str, Broker]:
    """A broker for each lane (the worker loop's, to queue its own wake-ups)."""
    return {lane: get_broker(lane_key(lane)) for lane in (STEPS, MESSAGES)}


def enqueue(func: str, *args, name: str, **kwargs) -> None:
    """Queue a task on its lane from inside a transaction. With the ORM
    broker on the same database it commits or rolls back with the caller's
    transaction (and so does its NOTIFY, `ListeningBroker.enqueue`, which
    PostgreSQL delivers at commit, once per channel and transaction however
    many wake-ups it sent); with another broker it is sent only after the
    commit. Either way the worker loop's sweep covers a wake-up that never
    arrives."""
    lane = lane_of(func)
    if "orm" in settings.Q_CLUSTER:
        async_task(func, *args, task_name=name, broker=get_broker(lane_key(lane)), **kwargs)
    else:
        transaction.on_commit(
            lambda: async_task(func, *args, task_name=name, broker=get_broker(lane_key(lane)), **kwargs)
        )


def wake(workflow: Workflow) -> None:
    """Ask the workers to look at this workflow now. With tracing on, the
    wake-up carries the caller's trace context (`trace=`), and the workflow
    keeps it (`traceparent`, in the caller's transaction): whichever drain
    claims the workflow's steps, the one this wake-up starts or any other
    (another cluster's, the worker loop's sweep), their spans continue the
    trace of the approval."""
    carried = telemetry.carrier()
    if traceparent := carried.get("trace", {}).get("traceparent", ""):
        Workflow.objects.filter(pk=workflow.pk).update(traceparent=traceparent)
        workflow.traceparent = traceparent
    enqueue("workflows.tasks.run_workflow", str(workflow.pk), name=f"run {workflow.pk}", **carried)


# Wake-ups of due work: whichever of them a worker takes drains every step
# that is due (`execution.drain`).
DRAINS = frozenset({"workflows.tasks.run_workflow", "workflows.tasks.drain"})
# Every wake-up that carries no work of its own: its task does whatever is
# due in the tables (the steps; the reviewers' notices; the plans' previews;
# webhook deliveries; chat messages), so one of them queued does the work of
# all, and a lane's broker drops the surplus (`QueueBroker._collapse`). A
# burst of 4,000 submissions queued 4,000 notice tasks on the messages lane,
# and each cost about seven commits of django-q2's bookkeeping while the
# steps ran; so did a previews task per plan.
WAKE_UPS = DRAINS | {
    "workflows.tasks.send_review_notices",
    "workflows.tasks.compute_due_previews",
    "workflows.tasks.deliver_webhooks",
    "workflows.tasks.send_chat",
}
# How far back a drain's wake-up is dated in the queue (below): further than
# any task waits, so that drains come out first, oldest first among them.
HEAD_START = timedelta(days=1)
# A task other than a drain that has waited this long is taken next after a
# drain (`QueueBroker._next`).
FAIR_WAIT = timedelta(seconds=2)
# How many surplus wake-ups one take drops at most (one statement); a larger
# surplus is dropped over the next takes.
COLLAPSE_BATCH = 1000


def _drains_kept() -> int:
    """Wake-ups of due work left queued behind the one taken (`_collapse`): one per worker."""
    return max(1, settings.Q_CLUSTER["workers"])


def drains_queued(broker) -> int:
    """Wake-ups of due work waiting in `broker`'s queue. Other tasks queue
    behind drains (`QueueBroker`; Redis keeps one order), so only the drains
    count; a broker that keeps no order counts every task."""
    return broker.drains_queued() if isinstance(broker, QueueBroker) else broker.queue_size()


def send(func: str, *, name: str, brokers: dict[str, Broker]) -> None:
    """Queue a task on its lane now, outside any transaction: the worker
    loop's own wake-ups, for work that has none (a retry come due, an
    expired lease)."""
    async_task(func, task_name=name, broker=brokers[lane_of(func)])


def _lock(task: str):
    """A queued task's `lock` (django-q2's "not before"): now, and for a
    wake-up of due work `HEAD_START` back (`QueueBroker`)."""
    lock = timezone.now()
    return lock - HEAD_START if _func(task) in WAKE_UPS else lock


def _kind(payload: str) -> str:
    """Which wake-ups of due work do the same work: every drain's, else
    each task's own."""
    func = _func(payload)
    return "drain" if func in DRAINS else func


def _func(payload: str) -> str:
    try:
        return str(SignedPackage.loads(payload).get("func", ""))
    except Exception:  # not ours to judge: django-q2 reports a bad package when it takes it
        return ""


class QueueBroker(ORM):
    """django-q2's ORM broker, taking the oldest task first, and wake-ups of
    due work before every other task.

    The ORM broker takes any ready row (no order). After a burst of
    submissions and approvals while no worker ran (a deploy, an outage), the
    queue holds each plan's reviewers' notice and preview task ahead of the
    approvals' wake-ups, and the workers went through thousands of tasks
    with nothing to do before the first effect. A drain's wake-up is queued
    dated `HEAD_START` back instead (`lock`, django-q2's "not before"), and
    the queue is read in `lock` order through its own index (migration
    0027), so the first task a worker takes after an outage starts the
    effects; the rest follow. Notices and previews now take the messages
    lane (`LANES`); what still shares the steps lane with the drains is bulk
    jobs' batches and tasks queued before lanes existed. Order is a hint
    only: each task re-reads the tables, and a task taken twice changes
    nothing."""

    def enqueue(self, task: str):
        return self.get_connection().create(key=self.list_key or Conf.CLUSTER_NAME, payload=task, lock=_lock(task)).pk

    def drains_queued(self) -> int:
        """Wake-ups of due work waiting in this queue (ready, not taken)."""
        return self.get_connection().filter(key=self.list_key, lock__lte=timezone.now() - HEAD_START / 2).count()

    # Whether this broker's last take was a drain's wake-up (`_next`).
    last_was_drain = False

    def _next(self, now, behind: int = 0) -> list:
        """The next tasks to take: wake-ups of due work first, oldest first,
        except that after a drain, a task that has waited `FAIR_WAIT` goes
        first. Under a sustained backlog the loop keeps a drain queued for
        every worker, and without that turn the other tasks of the lane (a
        bulk job's next batch) would wait until the backlog cleared; with it
        each drain's end lets one of them through. Just after an outage the
        first take is a drain, so the effects still start before the tasks
        queued ahead. Up to BULK tasks, and in queue order up to `behind`
        more that are not to be taken (`_take` counts them)."""
        queue = self.get_connection().filter(key=self.list_key)
        if self.last_was_drain:
            overdue = list(
                queue.filter(lock__gt=now - HEAD_START / 2, lock__lt=now - FAIR_WAIT).order_by("lock", "id")[
                    : Conf.BULK
                ]
            )
            if overdue:
                return overdue
        return list(queue.filter(lock__lt=now).order_by("lock", "id")[: Conf.BULK + behind])

    def _take(self) -> list:
        """Up to BULK ready tasks (`_next`), each locked for `retry` seconds
        by a conditional update (as the ORM broker does). Taking a drain's
        wake-up leaves no more than one per worker queued behind it
        (`_collapse`). The read that finds them also reads the next one
        per worker and one more: unless all of those are drains, there is
        nothing to drop, and no statement more stands between the take and
        the worker (an approval's wake-up, taken as it commits)."""
        queue = self.get_connection()
        now = timezone.now()
        keep = _drains_kept()
        found = self._next(now, behind=keep + 1)
        taken, drains = [], False
        for task in found[: Conf.BULK]:
            if queue.filter(id=task.id, lock=task.lock).update(lock=self.timeout(task)):
                taken.append((task.pk, task.payload))
                drains = drains or task.lock <= now - HEAD_START / 2
        if taken:
            self.last_was_drain = drains
        behind = [task for task in found[Conf.BULK :] if task.lock <= now - HEAD_START / 2]
        if drains and len(behind) > keep:
            self._collapse(now)
        return taken

    def _collapse(self, now) -> int:
        """Drop the wake-ups of due work queued beyond one per worker, of
        each kind (`_kind`).

        A burst of approvals queues a wake-up each, and any one drain runs
        everything due when it starts: after the first, the rest found
        nothing (their steps were already claimed) and each cost a task, a
        health check and an empty claim, hundreds in a row, on the CPU the
        effects needed. So with a burst of submissions and their notices'
        wake-ups. Every wake-up dropped here was committed before the
        ones kept were taken, so the tasks they start see its work; the
        worker loop's sweep queues them again whenever work is due and
        fewer are queued than workers. Returns how many were dropped."""
        keep = _drains_kept()
        queue = self.get_connection()
        kept: dict[str, int] = {}
        surplus = []
        for pk, payload in (
            queue.filter(key=self.list_key, lock__lte=now - HEAD_START / 2)
            .order_by("lock", "id")
            .values_list("id", "payload")[:COLLAPSE_BATCH]
        ):
            kind = _kind(payload)
            if kept.get(kind, 0) < keep:
                kept[kind] = kept.get(kind, 0) + 1
            else:
                surplus.append(pk)
        if not surplus:
            return 0
        dropped, _ = queue.filter(id__in=surplus, lock__lte=now - HEAD_START / 2).delete()
        log.debug("dropped %d wake-up(s) of due work queued behind the one taken", dropped)
        return dropped

    def dequeue(self):
        if tasks := self._take():
            return tasks
        time.sleep(Conf.POLL)  # an empty queue: spare the CPU, as the ORM broker does
        return None


# How long a listening pusher waits for a NOTIFY before it looks at its
# queue anyway. Every task queued here sends one (`ListeningBroker.enqueue`);
# what comes due without one is a task taken by a worker that died, ready
# again once its `Q_RETRY` lapses, which this delays by at most as long. An
# idle cluster's pushers looked every `Q_POLL` (0.1 s): twenty statements a
# second on PostgreSQL for each idle cluster of a fleet.
LISTENING_LOOK_SECONDS = 1.0


class ListeningBroker(QueueBroker):
    """The queue broker (above), woken by NOTIFY on its lane's channel. A
    lane's pusher (one process per lane and cluster) is the only caller of
    `dequeue`, so a cluster holds one LISTEN connection per lane, whatever
    its number of workers. When that
    connection fails, the broker sleeps `Q_POLL` like the ORM broker and
    connects again at the next empty look; while it listens it looks
    without a NOTIFY only every `LISTENING_LOOK_SECONDS`."""

    def __init__(self, list_key: str = None):
        super().__init__(list_key=list_key)
        lanes = [lane for lane in set(LANES.values()) if self.list_key == lane_key(lane)]
        self.channel = channel(lanes[0] if lanes else STEPS)
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
            listener = psycopg.connect(**listen_params(), autocommit=True)
            listener.execute(f"LISTEN {self.channel}")
        except psycopg.Error:
            log.warning("cannot LISTEN for wake-ups; polling every %s s until it can", Conf.POLL, exc_info=True)
            return None
        self._listener, self._listener_pid = listener, os.getpid()
        return listener

    def enqueue(self, task: str):
        """Queue the task and wake this lane's pushers, in one statement: the
        NOTIFY is delivered when the caller's transaction commits (at once
        outside one: the worker loop's own wake-ups) and dropped with its
        rollback, as the row is."""
        alias = self.get_connection().db
        table = connections[alias].ops.quote_name(OrmQ._meta.db_table)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"WITH queued AS (INSERT INTO {table} (key, payload, lock) VALUES (%s, %s, %s) RETURNING id) "
                "SELECT id, pg_notify(%s, '') FROM queued",
                [self.list_key or Conf.CLUSTER_NAME, task, _lock(task), self.channel],
            )
            return cursor.fetchone()[0]

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
            if list(listener.notifies(timeout=max(Conf.POLL, LISTENING_LOOK_SECONDS), stop_after=1)):
                self.woken += 1
                log.debug("woken by NOTIFY (%d)", self.woken)
                # Several commits may have notified: one look serves them all.
                list(listener.notifies(timeout=0))
        except psycopg.Error:
            log.warning("the LISTEN connection failed; connecting again", exc_info=True)
            self._listener = None
        return None
