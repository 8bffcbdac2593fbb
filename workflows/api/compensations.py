"""Compensations: request the undo of completed steps, and its second person's decision."""

from datetime import datetime
from uuid import UUID

from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from workflows import roles
from workflows.api import lookup
from workflows.api.schemas import Digest
from workflows.models import Compensation
from workflows.operations import compensation
from workflows.operations.deciding import Seen

router = Router()


class CompensationRequestIn(Schema):
    reason: str
    steps: list[str] | None = None


class CompensationDecisionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    reason: str = ""
    plan_hash: Digest = Field(
        ...,
        description="The compensation's `plan_hash` you saw (the digest of its undo "
        "steps and args): 409 `stale_revision` if it is not current",
    )


class UndoOut(Schema):
    compensates: str
    key: str
    action: str
    status: str | None
    operation_key: str | None


class IrreversibleOut(Schema):
    key: str
    action: str
    why: str


class CompensationOut(Schema):
    id: UUID
    workflow_id: UUID
    status: str
    requested_by: str
    authorized_by: str | None
    reason: str
    decision_reason: str
    plan_hash: str = Field(..., description="The digest of the undo steps and args it runs: what a decision names")
    steps: list[UndoOut]
    irreversible: list[IrreversibleOut]
    created_at: datetime


def compensation_out(comp: Compensation) -> dict:
    created = {s.key: s for s in comp.steps.all()}
    return {
        "id": comp.pk,
        "workflow_id": comp.workflow_id,
        "status": comp.status,
        "requested_by": comp.requested_by.get_username(),
        "authorized_by": comp.authorized_by.get_username() if comp.authorized_by else None,
        "reason": comp.reason,
        "decision_reason": comp.decision_reason,
        "plan_hash": compensation.current_hash(comp),
        "steps": [
            {
                **item,
                "status": created[item["key"]].status if item["key"] in created else None,
                "operation_key": created[item["key"]].operation_key if item["key"] in created else None,
            }
            for item in comp.plan
        ],
        "irreversible": comp.irreversible,
        "created_at": comp.created_at,
    }


@router.post(
    "/workflows/{workflow_id}/compensations",
    response={201: CompensationOut},
    summary="Request a compensation of completed steps (operators)",
)
def request_compensation(request, workflow_id: UUID, payload: CompensationRequestIn):
    lookup.require(request, roles.OPERATORS)
    workflow = lookup.workflow(request, workflow_id)
    comp = compensation.request(workflow, by=request.user, reason=payload.reason, step_keys=payload.steps)
    return Status(201, compensation_out(comp))


@router.get("/compensations/{compensation_id}", response=CompensationOut, summary="One compensation")
def get_compensation(request, compensation_id: UUID):
    return compensation_out(lookup.compensation(request, compensation_id))


@router.post(
    "/compensations/{compensation_id}/authorize",
    response=CompensationOut,
    summary="Authorize a compensation (reviewers, not the requester)",
)
def authorize_compensation(request, compensation_id: UUID, payload: CompensationDecisionIn):
    comp = compensation.authorize(
        lookup.compensation(request, compensation_id),
        by=request.user,
        seen=Seen(plan_hash=payload.plan_hash),
        reason=payload.reason,
    )
    return compensation_out(lookup.compensation(request, comp.pk))


@router.post(
    "/compensations/{compensation_id}/decline",
    response=CompensationOut,
    summary="Decline a compensation (reviewers, not the requester)",
)
def decline_compensation(request, compensation_id: UUID, payload: CompensationDecisionIn):
    comp = compensation.decline(
        lookup.compensation(request, compensation_id),
        by=request.user,
        seen=Seen(plan_hash=payload.plan_hash),
        reason=payload.reason,
    )
    return compensation_out(lookup.compensation(request, comp.pk))
