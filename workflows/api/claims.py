"""Who handles a plan awaiting review: claim, release, assign (a claim informs, never blocks)."""

from uuid import UUID

from ninja import Field, Router, Schema
from pydantic import ConfigDict

from workflows.api import lookup
from workflows.api.schemas import WorkflowOut
from workflows.operations import claims
from workflows.shapes import workflow_out

router = Router()


class AssignIn(Schema):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(..., min_length=1, max_length=150, description="The username of the reviewer to hand it to")


@router.post(
    "/workflows/{workflow_id}/claim",
    response=WorkflowOut,
    summary="Claim a plan awaiting a decision (\"I'm on it\"), or renew one's own claim; reviewers. "
    "A claim informs, never blocks, and lapses after REVIEW_CLAIM_MINUTES without activity",
)
def claim_workflow(request, workflow_id: UUID):
    claims.claim(lookup.workflow(request, workflow_id), by=request.user)
    return workflow_out(lookup.workflow(request, workflow_id))


@router.post("/workflows/{workflow_id}/release", response=WorkflowOut, summary="Release one's claim on a plan")
def release_workflow(request, workflow_id: UUID):
    claims.release(lookup.workflow(request, workflow_id), by=request.user)
    return workflow_out(lookup.workflow(request, workflow_id))


@router.post(
    "/workflows/{workflow_id}/assign",
    response=WorkflowOut,
    summary="Hand a plan that is unclaimed, or one's own, to another reviewer",
)
def assign_workflow(request, workflow_id: UUID, payload: AssignIn):
    claims.assign(lookup.workflow(request, workflow_id), by=request.user, to=payload.to)
    return workflow_out(lookup.workflow(request, workflow_id))
