"""A reviewer away hands their queue over: the caller's own delegation
(docs/explanation/review.md#delegation)."""

from datetime import datetime

from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from workflows.models import Delegation
from workflows.operations import delegation

router = Router()


class DelegationIn(Schema):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(..., description="The username of the reviewer who looks after your queue while you are away")
    until: datetime = Field(
        ...,
        description=f"When you are back: ISO 8601 with a time zone, in the future, at most "
        f"{delegation.MAX_DAYS} days ahead",
    )
    note: str | None = Field(None, description="Optional, checked as a reason is (at most 2000 characters)")


class DelegationOut(Schema):
    to: str
    until: datetime
    note: str
    since: datetime


def _out(row: Delegation) -> dict:
    return {"to": row.delegate.get_username(), "until": row.until, "note": row.note, "since": row.since}


@router.put(
    "/me/delegation",
    response=DelegationOut,
    summary="Away until a time: your notices, reminders, escalations and assignments go to a reviewer of "
    "your teams, who decides with their own eligibility (reviewers). Replaces your delegation",
)
def put_delegation(request, payload: DelegationIn):
    return _out(delegation.start(request.user, to=payload.to, until=payload.until, note=payload.note))


@router.get(
    "/me/delegation",
    response=DelegationOut,
    summary="Your delegation in force; 404 when there is none (never set, ended, or its time passed)",
)
def get_delegation(request):
    row = delegation.current(request.user)
    if row is None:
        raise delegation.NoDelegation("You have no delegation in force.")
    return _out(row)


@router.delete(
    "/me/delegation",
    response={204: None},
    summary="You are back: end your delegation now; 404 when none is in force",
)
def delete_delegation(request):
    delegation.end(request.user)
    return Status(204, None)
