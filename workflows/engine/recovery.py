"""Recovery: resume from known state after a crash or timeout (docs/explanation/recovery.md#reconciliation).

The worker's loop (and its start-up) puts steps whose worker vanished back
in line: leases that expired, or that a process on this host held and no
longer exists. Before any new attempt of such a step, an earlier attempt
whose outcome is unknown is reconciled with the action's
`lookup(operation_key)`: found, it is recorded as if the call had answered;
not found (once the lost request can no longer land), it is safe to try
again; no lookup and not idempotent, the step waits IN_DOUBT for an operator.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from workflows import actions, telemetry
from workflows.actions import ActionError, Outcome
from workflows.audit import journal
from workflows.audit.redaction import redact, redact_text
from workflows.engine import retry
from workflows.engine.leases import LOCAL_PREFIX, WORKER, LeaseLost, assert_lease, process_alive, worker_id
from workflows.engine.outcomes import deadline_of, in_doubt, release, verify
from workflows.engine.transitions import move
from workflows.models import Step, Workflow
from workflows.states import AttemptStatus, FailureClass, StepStatus

log = logging.getLogger(__name__)


def reconcile_earlier_attempts(step: Step, action, fence: int) -> bool:
    """Before a new attempt, settle any earlier one whose outcome is unknown
    (crash or timeout mid-effect). Returns True when the step moved on."""
    open_attempts = unsettled(step)
    if not open_attempts:
        return False
    if action.can_lookup:
        return settle_lookup(step, action, fence, open_attempts, look_up(action, step.operation_key))
    return settle_without_lookup(step, action, fence, open_attempts)


def unsettled(step: Step) -> list:
    """The step's earlier attempts whose outcome is not known."""
    return list(step.attempts.filter(status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN]))


def look_up(action, operation_key: str) -> Outcome | None | ActionError:
    """Ask the remote system whether the operation took effect. Touches no
    database, so it may run in an effect thread (`inflight`); a failure
    comes back as the error, never raised: any error means "cannot tell"."""
    try:
        return action.lookup(operation_key)
    except ActionError as err:
        return err
    except Exception as exc:
        log.exception("lookup of %s raised an unclassified error", action.name)
        return ActionError(FailureClass.UNKNOWN, redact_text(f"{type(exc).__name__}: {exc}")[:500])


def settle_lookup(step: Step, action, fence: int, open_attempts: list, found) -> bool:
    """What a lookup answered (`look_up`), recorded under the claim's fence.
    Returns True when the step moved on; False when the earlier attempts
    did not take effect and a new attempt may go ahead."""
    if isinstance(found, ActionError):
        err = found
        # Cannot tell yet: park the step for a later try; never guess.
        with transaction.atomic():
            assert_lease(step, fence, StepStatus.RUNNING)
            workflow = Workflow.objects.get(pk=step.workflow_id)
            due = retry.next_attempt_at(timezone.now(), len(open_attempts), deadline_of(step), err.retry_after)
            if due is None:
                in_doubt(
                    workflow,
                    step,
                    fence,
                    failure_class=err.failure_class,
                    data={"reason": "reconciliation lookup kept failing"},
                )
            else:
                release(
                    step,
                    StepStatus.WAITING_RETRY,
                    fence,
                    next_attempt_at=due,
                    failure_class=err.failure_class,
                    data={"reason": "reconciliation lookup failed", "failure_class": err.failure_class},
                )
        return True
    settled_at = _in_flight_until(open_attempts)
    if found is None and settled_at > timezone.now():
        # "Not found" only means "did not happen" once the earlier request
        # can no longer land: a killed worker's request may still be in
        # flight at the remote. Look again when its time is up.
        with transaction.atomic():
            assert_lease(step, fence, StepStatus.RUNNING)
            release(
                step,
                StepStatus.WAITING_RETRY,
                fence,
                next_attempt_at=settled_at,
                data={"reason": "an earlier request may still be in flight; reconciling when it cannot land"},
            )
        return True
    with transaction.atomic():
        assert_lease(step, fence, StepStatus.RUNNING)
        for attempt in open_attempts:
            move(
                attempt,
                AttemptStatus.RECONCILED,
                actor=WORKER,
                verb="attempt.reconciled",
                finished_at=attempt.finished_at or timezone.now(),
                data={"found": found is not None, "external_ref": found.external_ref if found else ""},
            )
        if found is not None:
            # In the commit that settles the attempts: were these two
            # commits, a crash between them would leave no open attempt
            # and no outcome, and the next worker would do the effect again.
            _record_reconciled(step, found, fence)
    if found is None:
        return False
    # The outcome found is verified like one the call answered, as a phase
    # of its own: of the latest attempt it settled.
    with telemetry.step_span("durable.verify", step, max(open_attempts, key=lambda attempt: attempt.number)):
        verify(step, action, fence)
    return True


def settle_without_lookup(step: Step, action, fence: int, open_attempts: list) -> bool:
    """Earlier attempts of an action that cannot be looked up: repeated with
    the same key when that is harmless, otherwise IN_DOUBT for an operator."""
    if action.is_idempotent(step.args):
        # The same operation key again is harmless; the interrupted attempts'
        # own outcome stays unknown, and says so.
        with transaction.atomic():
            assert_lease(step, fence, StepStatus.RUNNING)
            for attempt in open_attempts:
                if attempt.status == AttemptStatus.REQUESTED:
                    move(
                        attempt,
                        AttemptStatus.UNKNOWN,
                        actor=WORKER,
                        finished_at=timezone.now(),
                        data={"reason": "interrupted; repeated with the same operation key"},
                    )
        return False
    with transaction.atomic():
        assert_lease(step, fence, StepStatus.RUNNING)
        for attempt in open_attempts:
            if attempt.status == AttemptStatus.REQUESTED:
                move(attempt, AttemptStatus.UNKNOWN, actor=WORKER, finished_at=timezone.now())
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        in_doubt(
            workflow,
            step,
            fence,
            failure_class=FailureClass.UNKNOWN,
            data={"reason": "an earlier attempt may have taken effect and the action cannot be looked up"},
        )
    return True


def _in_flight_until(attempts) -> datetime:
    """When the latest of these requests can no longer take effect remotely:
    its start, plus the client's timeout, plus a grace for the remote's own
    processing (RECONCILE_GRACE_SECONDS)."""
    latest = max(a.started_at for a in attempts)
    return latest + timedelta(seconds=settings.ACTION_TIMEOUT_SECONDS + settings.RECONCILE_GRACE_SECONDS)


def _record_reconciled(step: Step, outcome: Outcome, fence: int) -> None:
    """Inside the caller's transaction, under its lease check: the outcome
    found by lookup, recorded as if the call had answered (VERIFYING)."""
    external_ref = redact_text(outcome.external_ref)
    moved = move(
        step,
        StepStatus.VERIFYING,
        actor=WORKER,
        verb="step.reconciled",
        guard={"fence": fence},
        result=redact(outcome.result),
        external_ref=external_ref,
        failure_class="",
        data={"external_ref": external_ref},
    )
    if not moved:
        raise LeaseLost()


def recover_expired_leases(now=None) -> int:
    """Put steps whose worker vanished back in line: leases that expired, and
    leases held by a process on this host that no longer exists (a worker
    restarted after SIGKILL need not wait for its old lease to run out).
    The next claim reconciles any attempt left REQUESTED before it performs."""
    now = now or timezone.now()
    in_flight = Step.objects.filter(status__in=[StepStatus.RUNNING, StepStatus.VERIFYING])
    expired = list(in_flight.filter(lease_expires_at__lt=now)[:500])
    # Few processes hold many leases: ask after each owner once.
    owners = (
        in_flight.filter(lease_owner__startswith=f"{LOCAL_PREFIX}:", lease_expires_at__gte=now)
        .order_by()
        .values_list("lease_owner", flat=True)
        .distinct()
    )
    gone = [owner for owner in owners if not process_alive(owner)]
    if gone:
        expired += list(in_flight.filter(lease_owner__in=gone, lease_expires_at__gte=now)[:500])
    recovered = 0
    for step in expired:
        with transaction.atomic():
            if not _lock_unless_busy(step):
                continue
            if step.status == StepStatus.RUNNING:
                moved = move(
                    step,
                    StepStatus.WAITING_RETRY,
                    actor=WORKER,
                    verb="step.lease_expired",
                    guard={"fence": step.fence, "lease_owner": step.lease_owner},
                    next_attempt_at=timezone.now(),
                    lease_expires_at=None,
                    data={"previous_owner": step.lease_owner, "fence": step.fence},
                )
            else:
                moved = _reverify_later(step)
            recovered += int(bool(moved))
    return recovered


def _lock_unless_busy(step: Step) -> bool:
    """Inside a transaction: lock the step's row, or False if another
    session holds it. A row locked right now is being written by its
    worker, or by a process stopped inside a transaction (its session ends
    at DB_IDLE_IN_TRANSACTION_SECONDS): the next tick looks again, and the
    worker loop goes on meanwhile rather than wait behind it, and with it
    every other recovery and its heartbeat. (SQLite has one writer: this
    transaction holds the whole database already.)"""
    if not connection.features.has_select_for_update_skip_locked:
        return True
    return bool(Step.objects.select_for_update(skip_locked=True).filter(pk=step.pk).values_list("pk"))


def _reverify_later(step: Step) -> bool:
    """A step that crashed between recording and COMPLETE keeps its outcome;
    a fresh lease lets a worker finish verification."""
    updated = Step.objects.filter(
        pk=step.pk, status=StepStatus.VERIFYING, fence=step.fence, lease_owner=step.lease_owner
    ).update(fence=F("fence") + 1, lease_owner="", lease_expires_at=None)
    if updated:
        journal.append(
            actor=WORKER,
            verb="step.lease_expired",
            obj_type="step",
            obj_id=step.pk,
            workflow_id=step.workflow_id,
            data={"status": step.status, "previous_owner": step.lease_owner},
        )
    return bool(updated)


def finish_verifying(limit: int = 100) -> int:
    """Verify steps left in VERIFYING without a lease (after a crash). Each
    is a claim of a step that recovery put back in line, with its spans
    (`durable.claim`, `durable.verify`) under its recorded attempt's number."""
    done = 0
    lease = timedelta(seconds=settings.STEP_LEASE_SECONDS)
    for step in Step.objects.filter(status=StepStatus.VERIFYING, lease_expires_at__isnull=True)[:limit]:
        began = time.time_ns()
        taken = Step.objects.filter(
            pk=step.pk, status=StepStatus.VERIFYING, fence=step.fence, lease_expires_at__isnull=True
        ).update(fence=F("fence") + 1, lease_owner=worker_id(), lease_expires_at=timezone.now() + lease)
        if not taken:
            continue
        step.refresh_from_db()
        step.attempt = step.attempts.order_by("-number").first()
        telemetry.claimed([step], began, again={step.pk})
        action = actions.find(step.action)
        if action is None:
            continue
        try:
            with telemetry.step_span("durable.verify", step, step.attempt):
                verify(step, action, step.fence)
        except LeaseLost:
            continue
        done += 1
    return done
