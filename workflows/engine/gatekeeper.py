"""The moves around a gate (docs/explanation/review.md#review): the pause a claim takes when it
finds a gated step ready, and leaving a gate when a workflow stops while it
waits there. Reads about gates are `gates`'."""

from __future__ import annotations

from workflows.audit import journal
from workflows.engine.leases import WORKER
from workflows.engine.transitions import move, move_many
from workflows.models import Step, Workflow
from workflows.states import FINISHED_STEP, StepStatus, WorkflowStatus


def pause(steps: list[Step]) -> None:
    """Inside the claim's transaction, with these (ready, PENDING) steps'
    rows locked: each waits at its gate, and so does its workflow."""
    log: list[journal.Entry] = []
    waiting = move_many(
        [step for step in steps if step.status == StepStatus.PENDING],
        StepStatus.WAITING_GATE,
        actor=WORKER,
        verb="step.waiting_gate",
        locked=True,
        log=log,
        next_attempt_at=None,
        data=lambda step: {"gate": step.gate},
    )
    workflows = {step.workflow_id: step.workflow for step in waiting}
    for status in (WorkflowStatus.APPROVED, WorkflowStatus.RUNNING):
        move_many(
            [w for w in workflows.values() if w.status == status],
            WorkflowStatus.WAITING_GATE,
            actor=WORKER,
            verb="workflow.waiting_gate",
            log=log,
            data=lambda workflow: {"steps": [s.key for s in waiting if s.workflow_id == workflow.pk]},
        )
    journal.append_many(log)


def skip(steps: list[Step]) -> None:
    """Inside the claim's transaction, with these (ready, PENDING) steps'
    rows locked: each ends SKIPPED, its gate having chosen another branch
    (docs/explanation/review.md#typed-decisions); the step after it is ready, and a workflow
    whose steps are all done with is complete."""
    log: list[journal.Entry] = []
    skipped = move_many(
        [step for step in steps if step.status == StepStatus.PENDING],
        StepStatus.SKIPPED,
        actor=WORKER,
        verb="step.skipped",
        locked=True,
        log=log,
        next_attempt_at=None,
        data=lambda step: {"when": step.when},
    )
    Step.objects.ready_after(skipped)
    touched = {step.workflow_id: step.workflow for step in skipped}
    unfinished = set(
        Step.objects.filter(workflow_id__in=touched, lane=0)
        .exclude(status__in=FINISHED_STEP)
        .values_list("workflow_id", flat=True)
        .distinct()
    )
    move_many(
        [w for pk, w in touched.items() if pk not in unfinished and w.status == WorkflowStatus.RUNNING],
        WorkflowStatus.COMPLETE,
        actor=WORKER,
        log=log,
    )
    journal.append_many(log)


def leave(workflow: Workflow, actor, verb: str, data: dict) -> None:
    """Inside the transaction that stops a workflow waiting at a gate
    (expired, cancelled): its gated step goes back to PENDING, never to run."""
    for step in Step.objects.filter(workflow=workflow, lane=0, status=StepStatus.WAITING_GATE):
        move(step, StepStatus.PENDING, actor=actor, verb=verb, data=data)
