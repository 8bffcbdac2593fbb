"""Standing grants: granting an agent approval in advance, listing,
authorizing (the second reviewer, on a destructive or irreversible action)
and revoking (docs/explanation/policies.md#standing-grants)."""

from datetime import datetime
from uuid import UUID

from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictInt

from workflows.models import StandingGrant
from workflows.operations import grants
from workflows.policy import conditions
from workflows.states import GrantStatus
from workflows.web.pagination import page_by_created

router = Router()


class GrantIn(Schema):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(..., max_length=150, description="The agent's username")
    action: str = Field(..., max_length=64, description="The action whose steps the grant approves")
    when: str = Field(
        ...,
        max_length=conditions.MAX_CONDITION_CHARS,
        description="One Cedar condition expression over the step, as inside `when { ... }`: "
        'for example `resource.args has title && resource.args.title like "Reset*"`',
    )
    max_uses: StrictInt = Field(..., description=f"How many steps it approves, 1 to {grants.MAX_USES}")
    until: datetime = Field(
        ..., description=f"When it ends: ISO 8601 with a time zone, in the future, at most {grants.MAX_DAYS} days ahead"
    )


class GrantReasonIn(Schema):
    reason: str = ""


class GrantOut(Schema):
    id: UUID
    basis: str = Field(..., description="What an approval by this grant names: grant:<id>")
    status: str = Field(..., description="PENDING, ACTIVE, EXHAUSTED, REVOKED or EXPIRED")
    agent: str
    team: str
    action: str
    when: str
    max_uses: int
    uses: int
    until: datetime
    needs_second_reviewer: bool = Field(..., description="A destructive or irreversible action: two reviewers")
    granted_by: str
    created_at: datetime
    authorized_by: str | None
    authorized_at: datetime | None
    revoked_by: str | None
    revoked_at: datetime | None
    revoke_reason: str


class GrantPage(Schema):
    items: list[GrantOut]
    next: str | None


def _name(user) -> str | None:
    return user.get_username() if user is not None else None


def grant_out(grant: StandingGrant) -> dict:
    return {
        "id": grant.pk,
        "basis": grant.basis,
        "status": grant.status,
        "agent": grant.agent.get_username(),
        "team": grant.team.name,
        "action": grant.action,
        "when": grant.condition,
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "until": grant.until,
        "needs_second_reviewer": grant.needs_second,
        "granted_by": grant.granted_by.get_username(),
        "created_at": grant.created_at,
        "authorized_by": _name(grant.authorized_by),
        "authorized_at": grant.authorized_at,
        "revoked_by": _name(grant.revoked_by),
        "revoked_at": grant.revoked_at,
        "revoke_reason": grant.revoke_reason,
    }


@router.post(
    "/grants",
    response={201: GrantOut},
    summary="Grant an agent standing approval of an action's steps under a Cedar condition (reviewers of the "
    "agent's team, not its owner); a destructive or irreversible action waits, PENDING, for a second reviewer",
)
def create_grant(request, payload: GrantIn):
    grant = grants.create(
        request.user,
        agent=payload.agent,
        action=payload.action,
        when=payload.when,
        max_uses=payload.max_uses,
        until=payload.until,
    )
    return Status(201, grant_out(grants.get_for_user(request.user, grant.pk)))


@router.get(
    "/grants",
    response=GrantPage,
    summary="Standing grants of your teams, newest first (an agent: its own)",
)
def list_grants(
    request,
    status: GrantStatus | None = None,
    agent: str | None = Query(None, max_length=150),
    action: str | None = Query(None, max_length=64),
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
):
    rows = StandingGrant.objects.visible_to(request.user).select_related(
        "agent", "team", "granted_by", "authorized_by", "revoked_by"
    )
    if status:
        rows = rows.filter(status=status)
    if agent:
        rows = rows.filter(agent__username=agent)
    if action:
        rows = rows.filter(action=action)
    page, next_cursor = page_by_created(rows, cursor, limit)
    return {"items": [grant_out(g) for g in page], "next": next_cursor}


@router.get("/grants/{grant_id}", response=GrantOut, summary="One standing grant")
def get_grant(request, grant_id: UUID):
    return grant_out(grants.get_for_user(request.user, grant_id))


@router.post(
    "/grants/{grant_id}/authorize",
    response=GrantOut,
    summary="Authorize a PENDING grant (a reviewer of the agent's team, another person than its grantor)",
)
def authorize_grant(request, grant_id: UUID, payload: GrantReasonIn):
    grant = grants.authorize(grants.get_for_user(request.user, grant_id), by=request.user, reason=payload.reason)
    return grant_out(grants.get_for_user(request.user, grant.pk))


@router.delete(
    "/grants/{grant_id}",
    response=GrantOut,
    summary='Revoke a grant (reviewers and operators of the agent\'s team), with `{"reason"}`: it approves '
    "nothing more, and the steps it approved stop before their next effect",
)
def revoke_grant(request, grant_id: UUID, payload: GrantReasonIn):
    grant = grants.revoke(grants.get_for_user(request.user, grant_id), by=request.user, reason=payload.reason)
    return grant_out(grants.get_for_user(request.user, grant.pk))
