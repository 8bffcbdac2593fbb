"""Who holds a step, and for how long (docs/explanation/checkpoint-protocol.md#checkpoint-protocol).

A claim gives its worker a lease on the step and a fencing number. The
lease is extended by a heartbeat while the worker is busy, and every write
after the claim first checks, under the step's row lock, that the step still
carries the claim's fencing number: a worker whose lease was taken over can
never record its late result over the new owner's.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from workflows.engine import planning
from workflows.models import Step
from workflows.states import StepStatus

log = logging.getLogger(__name__)

# The actor of every change a worker makes, in the audit trail.
WORKER = "worker"


def _local_prefix() -> str:
    """This host and PID namespace: hosts (or containers) that share a
    hostname must never judge each other's processes by pid."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()[:8]
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot, namespace = "noboot", 0
    return f"{socket.gethostname()}/{boot}/{namespace}"


LOCAL_PREFIX = _local_prefix()


def worker_id() -> str:
    return f"{LOCAL_PREFIX}:{os.getpid()}"


class LeaseLost(Exception):
    """Another worker took the step over; this one must not record anything."""


class LeaseKeeper:
    """Extends the claims' leases while their worker is busy (a heartbeat), so
    recovery does not take over a step whose worker is alive and waiting.
    Extends a lease only while the step still carries that claim's fencing
    number. One keeper serves a whole drain: claims join it (`hold`) when
    taken and leave it (`release`) when their outcome is recorded, and one
    statement per beat, on the keeper's own connection, extends them all.

    A beat comes every sixth of the lease and extends only the claims whose
    lease was last set (at their claim, or by a beat) a beat and a half or
    more ago: an extended claim is extended again every other beat, a third
    of the lease, as when every beat (once a third of the lease) extended
    every claim, and a new one within two and a half beats; while a step
    done within a quarter of the lease of its claim, as most are, costs no
    write of its row here (docs/performance.md#the-cost-of-a-step)."""

    def __init__(self, step_id: int | None = None, fence: int | None = None, *, claims=()):
        claims = list(claims) or ([(step_id, fence)] if step_id is not None else [])
        self.claims: dict[int, int] = {}
        # When this keeper last knew each claim's lease to be set (monotonic).
        self.set_at: dict[int, float] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)
        # Claims made before this keeper, at a time it does not know: extended at its first beat.
        self.hold(claims, set_at=float("-inf"))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stopped.set()
        self.thread.join()

    def hold(self, claims, set_at: float | None = None) -> None:
        """Keep these (step id, fence) claims alive; their leases were set
        just now (their claims committed), or at `set_at` (monotonic)."""
        set_at = time.monotonic() if set_at is None else set_at
        with self.lock:
            for step_id, fence in claims:
                self.claims[step_id] = fence
                self.set_at[step_id] = set_at

    def release(self, step_ids) -> None:
        with self.lock:
            for step_id in step_ids:
                self.claims.pop(step_id, None)
                self.set_at.pop(step_id, None)

    def beat(self, now: float) -> set[int]:
        """Extend the leases of the claims last set a beat and a half or
        more before `now` (monotonic); the ids of the steps extended."""
        due = settings.STEP_LEASE_SECONDS / 6 * 1.5
        with self.lock:
            claims = [
                (step_id, fence)
                for step_id, fence in self.claims.items()
                if now - self.set_at.get(step_id, float("-inf")) >= due
            ]
        if not claims:
            return set()
        held = Q()
        for step_id, fence in claims:
            held |= Q(pk=step_id, fence=fence)
        extended = _extend(held, settings.STEP_LEASE_SECONDS)
        with self.lock:
            for step_id in extended & self.set_at.keys():
                self.set_at[step_id] = now
        return extended

    def _beat(self) -> None:
        try:
            while not self.stopped.wait(settings.STEP_LEASE_SECONDS / 6):
                try:
                    # Read before the statement: the lease it sets runs from no earlier.
                    self.beat(time.monotonic())
                except DatabaseError:
                    # A dropped session or a busy SQLite must not end the
                    # heartbeat: reconnect and extend on the next beat.
                    with self.lock:
                        held = sorted(self.claims)
                    log.warning("lease heartbeat for step(s) %s failed; retrying", held)
                    connection.close()
        finally:
            connection.close()


def _extend(held: Q, lease: float) -> set[int]:
    """One beat; the ids of the steps whose leases it extended. The worker's
    own thread locks the same rows (in id order) to record outcomes; an
    UPDATE of the lot would lock them in whatever order it meets them and
    could deadlock with it. So the beat skips rows locked right now: their
    claim is being recorded, and the next beat extends what is still held."""
    with transaction.atomic(), planning.by_key():
        rows = Step.objects.filter(held, status__in=[StepStatus.RUNNING, StepStatus.VERIFYING])
        if connection.features.has_select_for_update_skip_locked:
            rows = rows.select_for_update(skip_locked=True)
        extended = set(rows.values_list("pk", flat=True))
        Step.objects.filter(pk__in=extended).update(lease_expires_at=timezone.now() + timedelta(seconds=lease))
    return extended


def assert_lease(step: Step, fence: int, status: str) -> None:
    """Inside a transaction: lock the step and make sure this claim still owns it."""
    current = Step.objects.select_for_update().filter(pk=step.pk).values_list("status", "fence").first()
    if current != (status, fence):
        raise LeaseLost()


def still_held(steps: list[Step], status: str) -> list[Step]:
    """Inside a transaction: lock the steps and keep those this worker's
    claims still own (the bulk form of `assert_lease`)."""
    return still_held_each([(step, status) for step in steps])


def still_held_each(expected: list[tuple[Step, str]]) -> list[Step]:
    """`still_held` for steps each expected in its own status, their rows
    locked by one statement in id order."""
    if not expected:
        return []
    by_pk = {step.pk: (step, status) for step, status in expected}
    current = Step.objects.select_for_update().filter(pk__in=by_pk).order_by("pk").values_list("pk", "status", "fence")
    owned = {pk for pk, row_status, fence in current if (row_status, fence) == (by_pk[pk][1], by_pk[pk][0].fence)}
    for step, _ in expected:
        if step.pk not in owned:
            log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)
    return [step for step, _ in expected if step.pk in owned]


def process_alive(owner: str) -> bool:
    """Whether the process a lease owner of this host names still runs."""
    try:
        pid = int(owner.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie nobody reaped (a container's pid 1 may not) is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
