"""Remote effects in flight: many per worker process (docs/explanation/concurrency.md#effects-in-flight).

A worker keeps up to WORKER_CONCURRENCY remote effects in flight at once,
each with its own claim, fencing number, committed REQUESTED attempt and
lease. The effects run on threads, and an effect thread holds no database
connection: it is handed the step's resolved arguments and its operation
key and hands back an `Outcome` or an `ActionError`. Every read and write
around it (policy recheck, REQUESTED attempts, outcomes, verification) is
made by the worker's own thread on the worker's own connection, in groups:
one commit for the REQUESTED attempts of the steps a claim took, one for
the outcomes that arrived together. One heartbeat thread (`LeaseKeeper`,
one more connection) extends every lease. So a worker process uses two
database connections whatever its concurrency.

Threads rather than asyncio: an action's `perform` is ordinary blocking
code (the built-ins use requests; a team's own actions may use any client
library), and a thread blocked on a socket costs little more than a
coroutine at these numbers, while the action interface stays plain.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from workflows import actions, telemetry
from workflows.actions import Action, ActionError, Outcome, PerformContext
from workflows.actions.context import performing
from workflows.audit import journal
from workflows.audit.redaction import redact_text
from workflows.engine import failpoints, outcomes, planning, policy, previews, proofs, recovery, references
from workflows.engine.leases import WORKER, LeaseKeeper, LeaseLost, still_held_each
from workflows.engine.transitions import move_many
from workflows.models import Attempt, Step
from workflows.states import FailureClass, StepStatus

log = logging.getLogger(__name__)

# How long an effect that is back may wait for more to join its group: until
# half the places in flight have theirs back (`Effects.gather`), or all in
# flight, counted from its own arrival (not from when the worker's thread,
# busy with a claim or a commit, next looks). A group's commits cost the
# worker's thread and the database about as much for a few answers as for
# thirty: when several workers share a slow host, each gets back few answers
# a moment, and a short wait left their groups so small that the commits took
# the CPU the effects needed (docs/performance.md#g-a-longer-gather).
GATHER_SECONDS = 0.25

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """This process's effect threads, made on first use: django-q forks its
    workers, and threads do not survive a fork. Kept for the process's life,
    so that each thread's HTTP keep-alive connections are reused."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(settings.WORKER_CONCURRENCY, thread_name_prefix="effect")
            _pool_pid = os.getpid()
        return _pool


def _detached(fn, *args):
    """Run in an effect thread. An action that touched the ORM after all
    would leave a connection open in a thread that lives on: close it, so
    that the worker's connection budget stays fixed."""
    try:
        return fn(*args)
    finally:
        connections.close_all()


def perform(
    action: Action, args: dict, operation_key: str, context: PerformContext | None = None
) -> Outcome | ActionError:
    """The effect itself, with no database, inside its perform context (the
    approval proof's source: `workflows.actions.context`). A bug in an
    action (any other exception) is an error of unknown outcome, handled
    like any other."""
    try:
        with performing(context):
            outcome = action.perform(args, operation_key)
    except ActionError as err:
        return err
    except Exception as exc:
        log.exception("action %s raised an unclassified error", action.name)
        return ActionError(
            FailureClass.UNKNOWN, redact_text(f"{type(exc).__name__}: {exc}")[:500], outcome_unknown=True
        )
    # Results and error texts are redacted when recorded; this reference is
    # recorded as it is, and a remote system may echo a secret into it.
    outcome.external_ref = redact_text(outcome.external_ref)
    return outcome


def write_requested(steps: list[Step], log: list) -> list[Attempt]:
    """Inside the caller's transaction, with the steps' claims checked: the
    REQUESTED attempt of each (the checkpoint before its effect), carrying
    its operation key, fence, policy version and the plan hash its recheck
    bound it to; their audit entries go to `log`."""
    versions = {name: p.version for name, p in policy.policies_for({step.action for step in steps}).items()}
    kid = proofs.current_kid() if any(not _in_process(step) for step in steps) else ""
    attempts = [
        Attempt(
            step=step,
            number=(step.attempts_made or 0) + 1,
            operation_key=step.operation_key,
            fence=step.fence,
            worker=step.lease_owner,
            lease_expires_at=step.lease_expires_at,
            policy_version=versions[step.action],
            plan_hash=step.bound_plan_hash,
            **proofs.identity(step, actions.find(step.action), kid),
        )
        for step in steps
    ]
    Attempt.objects.bulk_create(attempts)
    for attempt in attempts:
        attempt.step.attempt = attempt
        log.append(
            journal.Entry(
                WORKER,
                "attempt.requested",
                "attempt",
                attempt.pk,
                attempt.step.workflow_id,
                {
                    "step": attempt.step.key,
                    "number": attempt.number,
                    "operation_key": attempt.operation_key,
                    "fence": attempt.fence,
                },
            )
        )
    return attempts


def _in_process(step: Step) -> bool:
    action = actions.find(step.action)
    return action is None or action.in_process


def prepared(step: Step, keys=None) -> tuple[dict, PerformContext]:
    """On the worker's connection, before the effect: the step's resolved
    args (`references`) and the perform context of its REQUESTED attempt
    (`keys`: the signing key set read once for the batch). The effect
    thread gets plain values."""
    args, args_sha256 = references.resolve(step)
    return args, proofs.context(step, step.attempt, args_sha256, keys)


@dataclass
class Flight:
    step: Step
    action: Action
    # When this flight is a reconciliation lookup: the attempts it settles.
    settles: list | None = None
    # When this flight takes the step's preview again, before its effect.
    retake: bool = False

    @property
    def effect(self) -> bool:
        return self.settles is None and not self.retake


class Effects:
    """The remote effects one drain has in flight."""

    def __init__(self, keeper: LeaseKeeper, limit: int | None = None):
        self.keeper = keeper
        self.limit = limit or settings.WORKER_CONCURRENCY
        # Claimed ahead, three quarters of the places: when effects come
        # back, the steps that take their places are already claimed, and
        # only their REQUESTED attempts (one commit) stand between an answer
        # and the next send. Claims take half the places at a time
        # (`claim_group`): a claim costs the worker's thread about as much
        # for a few rows as for thirty, and it waits on that thread.
        self.ahead = max(1, self.limit * 3 // 4)
        self.claim_group = max(1, self.limit // 2)
        self.waiting: list[Step] = []
        self.flights: dict[Future, Flight] = {}
        # Performed, VERIFYING committed and verified: made COMPLETE by the
        # next commit, with the REQUESTED attempts of the steps taking their
        # places when there are some (`_request`), else on their own.
        self.verified: list[Step] = []
        # Their outcomes, and the requests of the steps taking their places,
        # share commits: the more answers a group holds, the less CPU and
        # database each costs. Half the places: the other half stays in flight.
        self.gather = max(1, self.limit // 2)
        # Notified by each effect thread as its effect comes back, with the
        # moment it did (`gathered` counts GATHER_SECONDS from the first).
        self.arrivals = threading.Condition()
        self.arrived_at: dict[Future, float] = {}

    @property
    def room(self) -> int:
        return self.limit - len(self.flights)

    @property
    def wanted(self) -> int:
        """How many more steps a claim may take: the room in flight and the look-ahead."""
        return self.limit + self.ahead - len(self.flights) - len(self.waiting)

    @property
    def busy(self) -> bool:
        return bool(self.flights or self.waiting)

    def start(self, steps: list[Step]) -> None:
        """Claimed remote steps: each waits for a place in flight (`_fill`)."""
        if not steps:
            return
        self.keeper.hold((step.pk, step.fence) for step in steps)
        failpoints.hit_each(failpoints.AFTER_CLAIM, steps)
        self.waiting.extend(steps)
        self._fill()

    def give_back(self) -> None:
        """The cluster is draining: the steps claimed ahead, not yet sent, go
        back in line at once (not when their leases run out), for the other
        clusters. Each is moved under its own claim, as a recovery would."""
        steps, self.waiting = self.waiting, []
        if not steps:
            return
        with transaction.atomic(), planning.by_key():
            move_many(
                steps,
                StepStatus.WAITING_RETRY,
                actor=WORKER,
                verb="step.released",
                expect=("fence",),
                data=lambda step: {"reason": "the cluster is draining", "fence": step.fence},
                next_attempt_at=timezone.now(),
                lease_owner="",
                lease_expires_at=None,
            )
        self.keeper.release([step.pk for step in steps])

    def _fill(self) -> None:
        if self.room > 0 and self.waiting:
            steps, self.waiting = self.waiting[: self.room], self.waiting[self.room :]
            self._prepare(steps)

    def _prepare(self, steps: list[Step]) -> None:
        """Recheck policy (right before the attempt, not at the claim),
        reconcile what an earlier attempt left unknown, take again the
        preview a binding action's approval was shown (on an effect thread,
        like a lookup: no connection is held while it waits), then request
        and send the rest."""
        with telemetry.steps_span("durable.policy_recheck", steps):
            checks = policy.evaluate_many(steps)
        ready = []
        for step in steps:
            action = actions.find(step.action)
            problems = (
                policy.problems(checks[step.pk]) + references.problems(step) + previews.request_problems(step, action)
            )
            try:
                if action is None or problems:
                    outcomes.block(step, step.fence, problems or [f"unknown action {step.action}"])
                elif step.open_attempts:
                    settles = recovery.unsettled(step)
                    if action.can_lookup:
                        self._send(
                            Flight(step, action, settles),
                            telemetry.in_thread("durable.reconcile", step, recovery.look_up),
                            action,
                            step.operation_key,
                        )
                        continue
                    if not recovery.settle_without_lookup(step, action, step.fence, settles):
                        ready.append(step)
                        continue
                elif previews.must_retake(step, action):
                    self._send(Flight(step, action, retake=True), previews.take, action, step.args)
                    continue
                else:
                    ready.append(step)
                    continue
            except LeaseLost:
                log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)
            self.keeper.release([step.pk])
        self._request(ready)

    def _complete(self) -> None:
        """The verified steps no REQUESTED commit took along: COMPLETE now."""
        if self.verified:
            verified, self.verified = self.verified, []
            with telemetry.steps_span("durable.complete", verified):
                outcomes.complete(verified)
            self.keeper.release([step.pk for step in verified])

    def _request(self, steps: list[Step]) -> None:
        """The checkpoint before the effects: every step's REQUESTED attempt
        in one commit, while its claim still holds; then each is sent. The
        same commit makes the verified steps COMPLETE (their VERIFYING was
        committed, and their check passed, before it): one commit fewer for
        each group of answers."""
        if not steps:
            return
        verified, self.verified = self.verified, []
        with telemetry.steps_span("durable.request", steps), transaction.atomic(), planning.by_key():
            held = still_held_each(
                [(step, StepStatus.VERIFYING) for step in verified] + [(step, StepStatus.RUNNING) for step in steps]
            )
            requesting = {step.pk for step in steps}
            entries: list[journal.Entry] = []
            outcomes.complete_held([step for step in held if step.pk not in requesting], entries)
            held = [step for step in held if step.pk in requesting]
            cancelled = policy.cancelled_workflows({step.workflow_id for step in held})
            stopped = [step for step in held if step.workflow_id in cancelled]
            held = [step for step in held if step.workflow_id not in cancelled]
            write_requested(held, entries)
            journal.append_many(entries)
        self.keeper.release([step.pk for step in verified])
        for step in stopped:
            outcomes.block(step, step.fence, policy.cancelled_problem())
        taken = {step.pk for step in held}
        self.keeper.release([step.pk for step in steps if step.pk not in taken])
        failpoints.hit_each(failpoints.AFTER_REQUESTED, held)
        keys = proofs.keyset() if held else None
        for step in held:
            action = actions.get(step.action)
            try:
                args, context = prepared(step, keys)
            except ActionError as err:
                outcomes.record_performed([step], {}, {step.pk: err})
                self.keeper.release([step.pk])
                continue
            self._send(
                Flight(step, action),
                telemetry.in_thread("durable.perform", step, perform),
                action,
                args,
                step.operation_key,
                context,
            )

    def _send(self, flight: Flight, fn, *args) -> None:
        future = pool().submit(_detached, fn, *args)
        self.flights[future] = flight
        future.add_done_callback(self._arrived)

    def _arrived(self, future: Future) -> None:
        with self.arrivals:
            self.arrived_at[future] = time.monotonic()
            self.arrivals.notify()

    def _back(self) -> int:
        return sum(future.done() for future in self.flights)

    def collect(self, timeout: float | None) -> int:
        """Record what has come back (waiting up to `timeout` for the
        first): lookups settled, answers and failures recorded together."""
        back = [(self.flights.pop(future), future.result()) for future in self.gathered(timeout)]
        if not back:
            return 0
        answers, failures, again = {}, {}, []
        for flight, answer in back:
            step = flight.step
            if flight.settles is not None:
                try:
                    with telemetry.step_span("durable.reconcile", step):
                        settled = recovery.settle_lookup(step, flight.action, step.fence, flight.settles, answer)
                    if not settled:
                        again.append(step)
                        continue
                except LeaseLost:
                    log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)
                self.keeper.release([step.pk])
            elif flight.retake:
                if not self._blocked_by_preview(step, answer):
                    again.append(step)
            elif isinstance(answer, ActionError):
                failures[step.pk] = answer
            else:
                answers[step.pk] = answer
        performed = [flight.step for flight, _ in back if flight.effect]
        verified: list[Step] = []
        outcomes.record_performed(performed, answers, failures, verified=verified)
        passed = {step.pk for step in verified}
        self.keeper.release([step.pk for step in performed if step.pk not in passed])
        self.verified.extend(verified)
        self._request(again)
        self._fill()
        self._complete()
        return len(back)

    def gathered(self, timeout: float | None) -> list[Future]:
        """The effects back, once one is (waiting up to `timeout` for it):
        until `gather` of them are, or every one in flight if fewer, so that
        they are recorded together, but no longer than GATHER_SECONDS after
        the first of them came back."""
        if not self.flights:
            return []
        want = min(self.gather, len(self.flights))
        with self.arrivals:
            if not self.arrivals.wait_for(self._back, timeout):
                return []
            # A future is done a moment before its callback notes the arrival.
            first = min(
                (at for future, at in self.arrived_at.items() if future in self.flights), default=time.monotonic()
            )
            self.arrivals.wait_for(lambda: self._back() >= want, first + GATHER_SECONDS - time.monotonic())
            back = [future for future in self.flights if future.done()]
            taken = set(back)
            self.arrived_at = {
                future: at for future, at in self.arrived_at.items() if future in self.flights and future not in taken
            }
        return back

    def _blocked_by_preview(self, step: Step, taken) -> bool:
        """Block the step if the preview taken again is not the approved one
        (its new preview stored with the block); False when it may go on."""
        found = previews.changed(step, taken)
        if found is None:
            return False
        problems, fields = found
        outcomes.block(step, step.fence, problems, **fields)
        self.keeper.release([step.pk])
        return True

    def finish(self) -> None:
        """Send every claimed step, wait for every effect and record it."""
        while self.busy:
            self._fill()
            self.collect(timeout=None)
            self._complete()
