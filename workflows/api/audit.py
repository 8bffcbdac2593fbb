"""The audit trail: its events for auditors, and verifying its chain now."""

from datetime import datetime
from typing import Any
from uuid import UUID

from django.http import Http404
from ninja import Field, Query, Router, Schema
from pydantic import ConfigDict

from workflows import roles
from workflows.api import lookup
from workflows.audit import journal
from workflows.audit.reading import event_row, select_events
from workflows.models import Workflow
from workflows.web.pagination import page_by_id

router = Router()


class VerifyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    workflow: UUID | None = Field(None, description="Only this workflow's chain (fast); omitted, every chain")


class VerificationOut(Schema):
    at: datetime
    by: str
    scope: str
    ok: bool
    events: int
    streams: int
    problem_count: int
    problems: list[str]
    seconds: float


@router.post(
    "/audit/verify",
    response=VerificationOut,
    summary="Recompute the audit chain now and record the check (auditors), as the console's Verify now",
)
def verify_audit(request, payload: VerifyIn):
    lookup.require(request, roles.AUDITORS)
    if payload.workflow and not Workflow.objects.visible_to(request.user).filter(pk=payload.workflow).exists():
        raise Http404
    streams = [str(payload.workflow)] if payload.workflow else None
    check = journal.record_verification(by=request.user.get_username(), streams=streams)
    return {name: getattr(check, name) for name in VerificationOut.model_fields}


class AuditEventOut(Schema):
    id: int
    stream: str
    seq: int
    at: str = Field(..., description="ISO-8601 UTC with microseconds, exactly as hashed")
    actor: str
    verb: str
    object_type: str
    object_id: str
    workflow_id: UUID | None
    data: dict[str, Any]
    prev_hash: str
    hash: str
    hash_alg: str = Field(
        ...,
        description="`hmac-sha256` (under the audit key `key_id`), or `sha256` for events written before keyed audit",
    )
    key_id: str
    subject: str = Field(..., description="The identity provider's subject of an SSO actor ('' otherwise)")
    issuer: str = Field(..., description="The identity provider (issuer) of an SSO actor")
    token_id: str = Field(..., description="The API token (its public prefix) an agent's request came with")
    client_address: str = Field(..., description="The client's address (X-Forwarded-For only from TRUSTED_PROXIES)")


class AuditEventPage(Schema):
    items: list[AuditEventOut]
    next: str | None


@router.get(
    "/audit",
    response=AuditEventPage,
    summary="Audit events, newest first (auditors); `since` inclusive, `until` exclusive, naive times are UTC",
)
def list_audit_events(
    request,
    workflow: UUID | None = None,
    actor: str = "",
    verb: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = Query(100, ge=1, le=500),
):
    lookup.reads(request, "audit")
    events = select_events(request.user, actor=actor, verb=verb, workflow=workflow, since=since, until=until)
    rows, next_cursor = page_by_id(events, cursor, limit)
    return {"items": [event_row(event) for event in rows], "next": next_cursor}
