"""Waiting for a workflow's decision or its end without holding a database
connection: `GET /api/v1/workflows/{id}/wait` (docs/explanation/agents.md#waiting).

One watcher per web process learns of status changes for every waiter of
that process: on PostgreSQL from the announcements that the moving
transactions send (`workflows.engine.announcements`), on one LISTEN
connection; elsewhere (SQLite, or `Q_LISTEN=0` behind a pooler in
transaction mode) by reading the statuses of the watched workflows every
`POLL_SECONDS` on one connection. A waiter registers its workflow before it
reads the status, so no change slips in between; whatever wakes it, it
reads the workflow again before it answers.

Served through the ASGI front (`workflows.web.front`, production), a waiter
holds neither a thread nor a connection while it waits: its request is
parked between passes through the view (`Parking`). Under a WSGI server
(runserver, the test live server, gunicorn's WSGI workers) the request's
thread waits, holding no database connection.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal
from uuid import UUID

import psycopg
from django.db import DatabaseError, connection
from django.http import HttpResponse

from workflows.db import listen_params
from workflows.engine import announcements
from workflows.models import AuditEvent, Workflow
from workflows.states import SETTLED_WORKFLOW, WorkflowStatus

log = logging.getLogger(__name__)

Until = Literal["decision", "terminal"]
# The longest server-side wait, and the default (seconds).
MAX_SECONDS, DEFAULT_SECONDS = 60, 30
# How often statuses are read where no announcement arrives.
POLL_SECONDS = 0.25
# A watcher with nothing to watch for this long lets its connection go.
IDLE_SECONDS = 5.0
# The key of the ASGI scope under which the front offers to park a request.
PARKING = "durableconsole.parking"

DECISIONS = {
    WorkflowStatus.APPROVED: "approved",
    WorkflowStatus.REJECTED: "rejected",
    WorkflowStatus.EXPIRED: "expired",
    WorkflowStatus.CANCELLED: "cancelled",
}


def reached(status: str, until: Until) -> bool:
    if until == "decision":
        return status != WorkflowStatus.PLANNED
    return status in SETTLED_WORKFLOW


def decision(workflow: Workflow) -> str | None:
    """How the plan left PLANNED, from its audit trail: the status may have
    moved on since (RUNNING, COMPLETE, ...)."""
    if workflow.status == WorkflowStatus.PLANNED:
        return None
    moved_to = (
        AuditEvent.objects.filter(workflow_id=workflow.pk, object_type="workflow", data__from=WorkflowStatus.PLANNED)
        .order_by("id")
        .values_list("data__to", flat=True)
        .first()
    )
    return DECISIONS.get(moved_to)


# --- one waiter, and the watcher of a process ---------------------------------------


class Watch:
    """What the watcher saw of one workflow since the waiter registered, or
    since it last woke: statuses, and None for "look again" (the watcher
    may have missed something, or is stopping)."""

    def __init__(self, workflow_id: UUID):
        self.workflow_id = workflow_id
        self._seen: set[str | None] = set()
        self._changed = threading.Condition()
        self._wake_loop: Callable[[], None] | None = None

    def deliver(self, status: str | None) -> None:
        """From the watcher's thread."""
        with self._changed:
            if status in self._seen:
                return
            self._seen.add(status)
            self._changed.notify_all()
            if self._wake_loop is not None:
                self._wake_loop()

    def _due(self, until: Until) -> bool:
        return any(status is None or reached(status, until) for status in self._seen)

    def wait(self, until: Until, deadline: float) -> None:
        """Block this thread until something worth a look or the deadline
        (`time.monotonic()`); forget what was seen."""
        with self._changed:
            self._changed.wait_for(lambda: self._due(until), timeout=max(0.0, deadline - time.monotonic()))
            self._seen.clear()

    async def wait_async(self, until: Until, deadline: float, stop: asyncio.Future) -> bool:
        """The same as a coroutine; False when `stop` finished first (the client left)."""
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(changed.set)
            except RuntimeError:  # the loop closed: nobody waits any more
                pass

        with self._changed:
            self._wake_loop = wake
        try:
            while True:
                with self._changed:
                    if self._due(until):
                        break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                woken = asyncio.ensure_future(changed.wait())
                done, _ = await asyncio.wait({woken, stop}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                if stop in done:
                    return False
                changed.clear()
            return True
        finally:
            with self._changed:
                self._wake_loop = None
                self._seen.clear()


class Watcher:
    """Status changes of the watched workflows, for every waiter of this
    process, from one thread and one database connection, both started by
    the first waiter and let go after `IDLE_SECONDS` without one."""

    def __init__(self):
        self._lock = threading.Lock()
        self._watches: dict[UUID, set[Watch]] = {}
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @contextmanager
    def watch(self, workflow_id: UUID) -> Iterator[Watch]:
        watch = Watch(workflow_id)
        with self._lock:
            self._watches.setdefault(workflow_id, set()).add(watch)
            if self._thread is None:
                self._stopping.clear()
                self._thread = threading.Thread(target=self._run, name="status-watcher", daemon=True)
                self._thread.start()
        try:
            yield watch
        finally:
            with self._lock:
                watches = self._watches.get(workflow_id, set())
                watches.discard(watch)
                if not watches:
                    self._watches.pop(workflow_id, None)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def waiting(self) -> int:
        with self._lock:
            return sum(len(watches) for watches in self._watches.values())

    def stop(self) -> None:
        """Let every waiter answer now and the connection go (a web process
        shutting down; tests)."""
        with self._lock:
            thread = self._thread
        self._stopping.set()
        self._deliver_all(None)
        if thread is not None:
            thread.join()

    def _deliver(self, workflow_id: UUID, status: str | None) -> None:
        with self._lock:
            watches = list(self._watches.get(workflow_id, ()))
        for watch in watches:
            watch.deliver(status)

    def _deliver_all(self, status: str | None) -> None:
        with self._lock:
            watches = [watch for group in self._watches.values() for watch in group]
        for watch in watches:
            watch.deliver(status)

    def _run(self) -> None:
        idle_since = None
        # This thread's own: a watcher started after this one stops has another.
        listener: psycopg.Connection | None = None
        try:
            while not self._stopping.is_set():
                with self._lock:
                    watched = list(self._watches)
                    if watched:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > IDLE_SECONDS:
                        self._thread = None
                        return
                if announcements.enabled():
                    listener = self._listen(listener)
                else:
                    self._poll(watched)
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
            if listener is not None:
                listener.close()
            connection.close()

    def _listen(self, listener: psycopg.Connection | None) -> psycopg.Connection | None:
        """Deliver what is announced for a moment; the connection to listen on next."""
        try:
            if listener is None:
                listener = psycopg.connect(**listen_params(), autocommit=True)
                listener.execute(f"LISTEN {announcements.CHANNEL}")
                # Whatever moved before LISTEN took effect was not heard.
                self._deliver_all(None)
            for note in listener.notifies(timeout=POLL_SECONDS * 2):
                if parsed := announcements.parse(note.payload):
                    self._deliver(*parsed)
            return listener
        except psycopg.Error:
            log.warning("the status watcher lost its LISTEN connection; connecting again", exc_info=True)
            if listener is not None:
                listener.close()
            self._stopping.wait(POLL_SECONDS)
            return None

    def _poll(self, watched: list[UUID]) -> None:
        if watched:
            try:
                for workflow_id, status in Workflow.objects.filter(pk__in=watched).values_list("pk", "status"):
                    self._deliver(workflow_id, status)
            except DatabaseError:
                log.warning("the status watcher cannot read statuses; trying again", exc_info=True)
                connection.close()
        self._stopping.wait(POLL_SECONDS)


watcher = Watcher()


# --- the view's side ------------------------------------------------------------------


class Parking:
    """The front's offer to wait for a request without a thread: the view
    parks the request instead of blocking, and the front passes it through
    the view again after a change or at the deadline."""

    def __init__(self):
        self.deadline: float | None = None
        self.until: Until = "decision"
        self.parked = False

    def begin(self, seconds: int) -> float:
        if self.deadline is None:
            self.deadline = time.monotonic() + seconds
        return self.deadline

    def park(self, until: Until) -> HttpResponse:
        self.until, self.parked = until, True
        # Never sent: the front answers after a later pass.
        return HttpResponse(status=204)


def wait_for(
    request, workflow_id: UUID, until: Until, seconds: int, read: Callable[[], Workflow]
) -> Workflow | HttpResponse:
    """The workflow once it reached `until`, or as it stands after
    `seconds`; under the front, a parked placeholder instead of waiting.
    `read` checks visibility (404) and loads what the answer shows."""
    scope = request.META.get("asgi.scope")
    if scope is not None:
        # Under the front: parked, or (a request it did not take for a wait)
        # answered as it stands, never held on one of its few Django threads.
        parking = scope.get(PARKING)
        deadline = parking.begin(seconds) if parking is not None else 0.0
        workflow = read()
        if reached(workflow.status, until) or time.monotonic() >= deadline or watcher.stopping:
            return workflow
        return parking.park(until)
    deadline = time.monotonic() + seconds
    with watcher.watch(workflow_id) as watch:
        while True:
            workflow = read()
            if reached(workflow.status, until) or time.monotonic() >= deadline or watcher.stopping:
                return workflow
            # Inside a transaction (a test's) the connection is not this view's to let go.
            if not connection.in_atomic_block:
                connection.close()
            watch.wait(until, deadline)
