"""A workflow's steps: the gate before a step, and settling a step left in doubt."""

from typing import Any, Literal
from uuid import UUID

from django.http import Http404
from ninja import Field, Router, Schema
from pydantic import ConfigDict

from workflows.api import lookup
from workflows.api.schemas import DecisionIn, Digest, WorkflowOut, seen
from workflows.operations import gates as gate_decisions
from workflows.operations import resolution
from workflows.shapes import workflow_out

router = Router()


class GateDecisionIn(DecisionIn):
    results_digest: Digest | None = Field(
        None,
        description="The digest of the results you were shown (`gate.results_digest`): required when steps "
        "ran before the gate (400 naming it), 409 `results_changed` if they changed since.",
    )


class GateApprovalIn(GateDecisionIn):
    choice: str | None = Field(
        None,
        max_length=200,
        description="At a gate with `options`: the one you choose (required there; 400 with `fields` when not "
        "one of them). Later steps whose `when` names another choice end SKIPPED.",
    )
    input: dict[str, Any] | None = Field(
        None,
        description="At a gate with an `input_schema`: the first approver's input, valid against it (400 with "
        "`fields`); each later approver sends the same choice and input, else 409 `decision_differs` with "
        "`current`.",
    )


@router.post(
    "/workflows/{workflow_id}/steps/{step_key}/approve",
    response=WorkflowOut,
    summary="Approve the gate the workflow waits at before this step (reviewers, not the submitter); the run "
    "goes on once the gate's approvals are in",
)
def approve_gate(request, workflow_id: UUID, step_key: str, payload: GateApprovalIn):
    workflow = lookup.workflow(request, workflow_id)
    gate_decisions.approve(
        workflow,
        lookup.gate_step(workflow, step_key),
        by=request.user,
        seen=seen(payload),
        comment=payload.comment,
        choice=payload.choice,
        given_input=payload.input,
    )
    return workflow_out(lookup.workflow(request, workflow_id))


@router.post(
    "/workflows/{workflow_id}/steps/{step_key}/reject",
    response=WorkflowOut,
    summary="Reject the gate: the workflow ends REJECTED, its completed steps can then be compensated",
)
def reject_gate(request, workflow_id: UUID, step_key: str, payload: GateDecisionIn):
    workflow = lookup.workflow(request, workflow_id)
    gate_decisions.reject(
        workflow, lookup.gate_step(workflow, step_key), by=request.user, seen=seen(payload), comment=payload.comment
    )
    return workflow_out(lookup.workflow(request, workflow_id))


class ResolutionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["happened", "not_happened", "compensate"] = Field(
        ...,
        description="`happened`: record the evidence and go on; `not_happened`: run the step again with the "
        "same operation key; `compensate`: it happened and must be undone (requests a compensation)",
    )
    external_ref: str = Field("", max_length=200, description="Where it happened: required unless `not_happened`")
    result: dict[str, Any] | None = Field(None, description="The step's result as seen in the other system")
    reason: str


@router.post(
    "/workflows/{workflow_id}/steps/{step_key}/resolve",
    response=WorkflowOut,
    summary="Settle an in-doubt step with evidence (operators), as the console does",
)
def resolve_step(request, workflow_id: UUID, step_key: str, payload: ResolutionIn):
    workflow = lookup.workflow(request, workflow_id)
    step = workflow.steps.filter(key=step_key).first()
    if step is None:
        raise Http404
    resolution.resolve(
        step,
        by=request.user,
        decision=payload.decision,
        reason=payload.reason,
        external_ref=payload.external_ref,
        result=payload.result,
    )
    return workflow_out(lookup.workflow(request, workflow_id))


class ConfirmationIn(Schema):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(..., description="What you checked")
    resolution_digest: str = Field(
        ..., max_length=64, description="The `digest` of the step's `resolution` you confirm"
    )


@router.post(
    "/workflows/{workflow_id}/steps/{step_key}/resolve/confirm",
    response=WorkflowOut,
    summary="Confirm an operator's answer for an in-doubt step whose result later steps read (reviewers and "
    "operators, not the one who gave it): it takes effect and the run goes on",
)
def confirm_resolution(request, workflow_id: UUID, step_key: str, payload: ConfirmationIn):
    workflow = lookup.workflow(request, workflow_id)
    step = workflow.steps.filter(key=step_key).first()
    if step is None:
        raise Http404
    resolution.confirm(step, by=request.user, reason=payload.reason, digest=payload.resolution_digest)
    return workflow_out(lookup.workflow(request, workflow_id))
