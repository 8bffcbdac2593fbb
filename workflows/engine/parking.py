"""Parking a step that cannot go on: its dead letter and redacted trace.

Runs inside the transaction that moved the step to DEAD_LETTERED; what an
operator may then do with the entry (replay, discard) is
`workflows.operations.deadletters`.
"""

from workflows import outbox
from workflows.audit import journal
from workflows.audit.redaction import redact, redact_text
from workflows.models import Attempt, DeadLetter, Step, Trace
from workflows.shapes import workflow_out


def park(step: Step, attempt: Attempt | None, failure_class: str, error: str) -> DeadLetter:
    """Record a dead letter for a step that just moved to DEAD_LETTERED.
    Runs inside the caller's transaction."""
    timings = {}
    if attempt is not None:
        timings = {
            "started_at": attempt.started_at.isoformat(),
            "finished_at": attempt.finished_at.isoformat() if attempt.finished_at else None,
            "duration_ms": attempt.duration_ms,
        }
    trace = Trace.objects.create(
        step=step,
        attempt=attempt,
        failure_class=failure_class,
        error=redact_text(error)[:2000],
        request={"action": step.action, "operation_key": step.operation_key, "arg_names": sorted(redact(step.args))},
        timings=timings,
    )
    dead_letter = DeadLetter.objects.create(
        workflow_id=step.workflow_id,
        step=step,
        action=step.action,
        step_key=step.key,
        failure_class=failure_class,
        attempt_count=step.attempts.filter(number__gt=step.retry_base).count(),
        trace=trace,
    )
    journal.append(
        actor="worker",
        verb="dead_letter.created",
        obj_type="dead_letter",
        obj_id=dead_letter.pk,
        workflow_id=step.workflow_id,
        data={
            "step": step.key,
            "failure_class": failure_class,
            "attempts": dead_letter.attempt_count,
            "trace": str(trace.pk),
        },
    )
    outbox.emit(
        "step.dead_lettered",
        step.workflow_id,
        {
            "dead_letter": {
                "id": str(dead_letter.pk),
                "step_key": step.key,
                "action": step.action,
                "failure_class": failure_class,
                "attempt_count": dead_letter.attempt_count,
            }
        },
        shape=workflow_out,
    )
    return dead_letter
