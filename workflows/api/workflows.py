"""Plans (docs/reference/http-api.md#http-api): submit, read, wait for, decide on, revise and cancel a workflow."""

from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictInt, StringConstraints

from workflows.api import lookup
from workflows.api.schemas import DecisionIn, Digest, ReasonIn, Text, WorkflowOut, WorkflowPage, seen
from workflows.models import Workflow
from workflows.operations import approvals, cancellation, claims, plans, revisions
from workflows.shapes import workflow_out
from workflows.states import WorkflowStatus
from workflows.web import waiting
from workflows.web.pagination import page_by_created

router = Router()


class CompensationIn(Schema):
    action: str = Field(..., min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)


GATE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["approvals"],
    "properties": {
        "approvals": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "description": "Reviewers who must approve before this step runs",
        },
        "note": {"type": "string", "maxLength": 2000, "description": "What the reviewers are to check at the gate"},
        "options": {
            "type": "array",
            "minItems": 2,
            "maxItems": 20,
            "uniqueItems": True,
            "items": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": "The choices its approvers pick one of (the decision's `choice`); later steps' `when` "
            "names one",
        },
        "input_schema": {
            "type": "object",
            "description": "A JSON Schema of an object the first approver fills in (the decision's `input`) and "
            "the others approve; needs approvals >= 2. Later args take it by "
            '{"$decision": "<gate key>.input.<field>"}',
        },
    },
}

WHEN_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["gate", "choice"],
    "properties": {
        "gate": {"type": "string", "description": "The key of an earlier step whose gate has options"},
        "choice": {"type": "string", "description": "One of its options: on any other, this step ends SKIPPED"},
    },
}


class StepIn(Schema):
    key: str = Field(..., min_length=1, max_length=64)
    action: str = Field(..., min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)
    compensation: CompensationIn | None = None
    # Checked by `plans.validate` (field errors at steps.<i>.gate.<field>) and
    # stored exactly as sent, so it is a plain object here.
    gate: dict[str, Any] | None = Field(
        None,
        description="Pause the run before this step until reviewers approve it, seeing the results of the "
        "steps before it (not on the first step)",
        json_schema_extra={"anyOf": [GATE_SCHEMA, {"type": "null"}]},
    )
    when: dict[str, Any] | None = Field(
        None,
        description="Run this step only on one choice of an earlier gate; on any other it ends SKIPPED",
        json_schema_extra={"anyOf": [WHEN_SCHEMA, {"type": "null"}]},
    )


class PlanIn(Schema):
    name: str = Text
    submission_key: str = Text
    # Strict: "5" or 5.0 is refused, not read as 5.
    deadline_seconds: StrictInt | None = None
    context: dict[str, Any] | None = None
    callback_url: str | None = Field(
        None,
        max_length=2048,
        description=(
            "Where this plan's events are posted, signed with your webhook secret (Standard Webhooks): https, or "
            "http to a loopback host."
        ),
    )
    steps: list[StepIn] = Field(..., min_length=1)
    review: dict[str, Any] | None = Field(
        None,
        description="Review deadline (seconds from submission, before the plan's own deadline), reminders "
        "so many seconds before it, and the group told once it passes; what the plan's own deadline does: "
        'on_expiry "expire" (the default, EXPIRED) or "escalate" (once, to escalate_to, the deadline extended '
        "by extend_seconds; it expires at that second deadline); checked by the server "
        "(field errors at review.<field>); inside the plan hash when it names on_expiry",
        json_schema_extra={
            "anyOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["deadline_seconds"],
                    "properties": {
                        "deadline_seconds": {"type": "integer", "minimum": 1},
                        "remind_before_seconds": {
                            "type": "array",
                            "maxItems": 5,
                            "items": {"type": "integer", "minimum": 1},
                        },
                        "escalate_to": {"type": "string"},
                        "on_expiry": {"enum": ["expire", "escalate"], "default": "expire"},
                        "extend_seconds": {"type": "integer", "minimum": 1, "maximum": plans.MAX_DEADLINE_SECONDS},
                    },
                },
                {"type": "null"},
            ]
        },
    )


class ApprovalIn(DecisionIn):
    preview_digests: dict[Annotated[str, StringConstraints(max_length=64)], Digest] | None = Field(
        None,
        description="`{step key: digest}` of the previews you were shown (every step whose preview is READY; "
        "`{}` when none were): required when the plan has previews (400 naming it), 409 "
        "`preview_changed` if they are no longer the current ones.",
    )


@router.post("/workflows", response={200: WorkflowOut, 201: WorkflowOut}, summary="Submit a plan")
def submit_workflow(request, payload: PlanIn):
    submission = plans.submit(request.user, payload.dict())
    workflow = lookup.workflow(request, submission.workflow.pk)
    return Status(201 if submission.created else 200, workflow_out(workflow))


@router.get("/workflows", response=WorkflowPage, summary="List workflows, newest first")
def list_workflows(
    request,
    status: WorkflowStatus | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
    claim: Literal["mine", "unclaimed"] | None = Query(
        None, description="`mine`: plans you hold; `unclaimed`: plans nobody holds now"
    ),
):
    workflows = lookup.visible_workflows(request.user)
    if status:
        workflows = workflows.filter(status=status)
    if claim == "mine":
        workflows = claims.held_by(workflows, request.user)
    elif claim == "unclaimed":
        workflows = claims.unclaimed(workflows)
    rows, next_cursor = page_by_created(workflows, cursor, limit)
    return {"items": [workflow_out(w) for w in rows], "next": next_cursor}


@router.get("/workflows/{workflow_id}", response=WorkflowOut, summary="One workflow with its steps and attempts")
def get_workflow(request, workflow_id: UUID):
    workflow = lookup.workflow(request, workflow_id)
    claims.touch(workflow, request.user)  # the holder's activity renews their claim
    return workflow_out(workflow)


class WaitOut(WorkflowOut):
    decision: Literal["approved", "rejected", "expired", "cancelled"] | None = Field(
        ..., description="How the plan left PLANNED, from its records; null while it awaits review"
    )


@router.get(
    "/workflows/{workflow_id}/wait",
    response=WaitOut,
    url_name="workflow_wait",
    summary="Wait for a decision or the end of a workflow, then answer with it",
    description="Answers as soon as the workflow reaches `until` (`decision`: any status but PLANNED; "
    "`terminal`: COMPLETE, REJECTED, EXPIRED, CANCELLED, FAILED, NEEDS_ATTENTION, COMPENSATED "
    "or COMPENSATION_FAILED), or with its current state after `timeout` seconds (1 to 60). "
    "Ask again to wait longer.",
)
def wait_for_workflow(
    request,
    workflow_id: UUID,
    until: waiting.Until = "decision",
    timeout: int = Query(waiting.DEFAULT_SECONDS, ge=1, le=waiting.MAX_SECONDS),
):
    workflow = waiting.wait_for(
        request, workflow_id, until, timeout, read=lambda: lookup.workflow(request, workflow_id)
    )
    if not isinstance(workflow, Workflow):
        return workflow  # parked: the front answers after a later pass
    return {**workflow_out(workflow), "decision": waiting.decision(workflow)}


@router.post(
    "/workflows/{workflow_id}/approve",
    response=WorkflowOut,
    summary="Approve the revision of a plan you saw (reviewers, not its authors), binding its hash and the "
    "previews you were shown; 409 `stale_revision` when the plan changed since, `preview_pending` "
    "while a step that waits for its preview (every action that sends a request) has none, `preview_changed` "
    "when they changed since",
)
def approve_workflow(request, workflow_id: UUID, payload: ApprovalIn):
    # Who may approve, and what, is checked once, under the plan's lock.
    approvals.approve(workflow_id, by=request.user, seen=seen(payload), comment=payload.comment)
    return workflow_out(lookup.workflow(request, workflow_id))


@router.post(
    "/workflows/{workflow_id}/previews/retake",
    response=WorkflowOut,
    summary="Have a worker take the previews of the steps yet to run again (reviewers)",
)
def retake_workflow_previews(request, workflow_id: UUID):
    approvals.retake_previews(lookup.workflow(request, workflow_id), by=request.user)
    return workflow_out(lookup.workflow(request, workflow_id))


@router.post("/workflows/{workflow_id}/reject", response=WorkflowOut, summary="Reject a plan (reviewers)")
def reject_workflow(request, workflow_id: UUID, payload: DecisionIn):
    approvals.reject(workflow_id, by=request.user, seen=seen(payload), comment=payload.comment)
    return workflow_out(lookup.workflow(request, workflow_id))


@router.post(
    "/workflows/{workflow_id}/cancel",
    response=WorkflowOut,
    summary="Cancel a plan: its submitter while PLANNED, an operator once approved; no step starts after "
    "it, an effect in flight is recorded, completed steps can then be compensated",
)
def cancel_workflow(request, workflow_id: UUID, payload: ReasonIn):
    cancellation.cancel(lookup.workflow(request, workflow_id), by=request.user, reason=payload.reason)
    return workflow_out(lookup.workflow(request, workflow_id))


class StepEditIn(Schema):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(..., max_length=64)
    args: dict[str, Any] = Field(
        ..., description="The step's new arguments, whole, as its action's model takes them (see GET /api/v1/actions)"
    )


class ReviseIn(Schema):
    model_config = ConfigDict(extra="forbid")

    steps: list[StepEditIn] = Field(..., min_length=1, max_length=50)
    comment: str = Field("", max_length=4000)
    revision: StrictInt = Field(
        ...,
        ge=1,
        description="The revision you edit: 409 `stale_revision` (with `current`) "
        "if it is no longer current, so two editors never overwrite "
        "each other",
    )


@router.post(
    "/workflows/{workflow_id}/revise",
    response=WorkflowOut,
    summary="Edit the arguments of steps of a plan awaiting review (reviewers): revision N+1 with a new plan "
    "hash; approvals of earlier revisions no longer count, and the editor cannot approve it",
)
def revise_workflow(request, workflow_id: UUID, payload: ReviseIn):
    steps = [{"key": step.key, "args": step.args} for step in payload.steps]
    revisions.revise(
        lookup.workflow(request, workflow_id),
        by=request.user,
        revision=payload.revision,
        steps=steps,
        comment=payload.comment,
    )
    return workflow_out(lookup.workflow(request, workflow_id))
