"""The engine's side of a compensation run: what an undo step's outcome
means for the run and its workflow. Runs inside the transaction that
recorded the outcome. Requesting, authorizing and resuming a compensation
are operations (`workflows.operations.compensation`).
"""

from workflows.engine.leases import WORKER
from workflows.engine.transitions import move
from workflows.models import Compensation, Step, Workflow
from workflows.states import CompensationStatus, StepStatus, WorkflowStatus


def step_complete(workflow: Workflow, step: Step) -> None:
    """An undo step completed: mark what it undid, and finish the run if done."""
    comp = Compensation.objects.select_for_update().get(pk=step.compensation_run_id)
    original = Step.objects.get(pk=step.compensates_id)
    move(
        original,
        StepStatus.COMPENSATED,
        actor=WORKER,
        verb="step.compensated",
        data={
            "undo_step": step.key,
            "undo_operation_key": step.operation_key,
            "external_ref": step.external_ref,
            "compensation": str(comp.pk),
        },
    )
    if not comp.steps.exclude(status=StepStatus.COMPLETE).exists():
        finish(workflow, comp)


def finish(workflow: Workflow, comp: Compensation) -> None:
    move(
        comp, CompensationStatus.COMPENSATED, actor=WORKER, data={"irreversible": [i["key"] for i in comp.irreversible]}
    )
    move(
        workflow,
        WorkflowStatus.COMPENSATED,
        actor=WORKER,
        data={"compensation": str(comp.pk), "irreversible": [i["key"] for i in comp.irreversible]},
    )


def halt(workflow: Workflow, step: Step, **data) -> None:
    """An undo step dead-lettered, went in doubt or was blocked: the
    compensation stops with what remains listed; an operator resumes it."""
    comp = Compensation.objects.select_for_update().get(pk=step.compensation_run_id)
    remaining = list(comp.steps.exclude(status=StepStatus.COMPLETE).values_list("key", flat=True))
    if comp.status == CompensationStatus.RUNNING:
        move(comp, CompensationStatus.FAILED, actor=WORKER, data={"step": step.key, "remaining": remaining, **data})
    if workflow.status == WorkflowStatus.COMPENSATING:
        move(
            workflow,
            WorkflowStatus.COMPENSATION_FAILED,
            actor=WORKER,
            data={"step": step.key, "remaining": remaining, **data},
        )
