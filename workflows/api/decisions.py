"""Several plans decided in one call (docs/guides/reviewers.md#deciding-several-plans-at-once):
each item as its own `POST /workflows/{id}/approve` or `/reject` would be,
answered with the status and error that call would have had."""

from typing import Literal
from uuid import UUID

from ninja import Field, Router, Schema
from pydantic import ConfigDict

from workflows.api.errors import ErrorBody, of_domain_error
from workflows.api.schemas import seen
from workflows.api.workflows import ApprovalIn
from workflows.operations import approvals

router = Router()


class BulkDecisionIn(ApprovalIn):
    """One plan's decision: the body of its own approve or reject call (a
    rejection binds no previews: its `preview_digests` are not checked), and
    which plan and which decision."""

    workflow: UUID = Field(..., description="The plan decided on")
    decision: Literal["approve", "reject"]


class DecisionsIn(Schema):
    model_config = ConfigDict(extra="forbid")

    decisions: list[BulkDecisionIn] = Field(
        ...,
        min_length=1,
        max_length=approvals.MAX_AT_ONCE,
        description=f"1 to {approvals.MAX_AT_ONCE} decisions, each plan once; any item malformed, and the "
        "whole call is a 400 naming it (`decisions.<i>.<field>`) with nothing decided",
    )


class ItemError(ErrorBody):
    """The error object of one refused decision, every member its own call's
    would have (`fields`, `current`, ...)."""

    model_config = ConfigDict(extra="allow")


class DecisionResultOut(Schema):
    workflow: UUID
    status: int = Field(..., description="The HTTP status this decision alone would have answered")
    error: ItemError | None = Field(
        None, description="Absent when decided; else the error object that call would have answered"
    )


class DecisionsOut(Schema):
    results: list[DecisionResultOut] = Field(..., description="One per decision, in the order sent")


@router.post(
    "/decisions",
    response=DecisionsOut,
    exclude_unset=True,
    summary="Decide several plans at once (reviewers): each approval or rejection as its own call would be, in "
    "its own transaction, answered with that call's status and error; at most 100, each plan once, or 400 and "
    "nothing decided",
)
def decide_many(request, payload: DecisionsIn):
    decisions = [
        approvals.Decision(item.workflow, item.decision, seen(item), item.comment) for item in payload.decisions
    ]
    outcomes = approvals.decide_each(decisions, by=request.user)
    results = []
    for decision, refused in zip(decisions, outcomes, strict=True):
        result = {"workflow": decision.workflow, "status": 200}
        if refused is not None:
            result.update(status=refused.status, error=of_domain_error(refused))
        results.append(result)
    return {"results": results}
