"""Webhook endpoints (one team's plans' events, signed) and their deliveries."""

from datetime import datetime
from uuid import UUID

from ninja import Field, Query, Router, Schema, Status
from ninja.errors import ValidationError
from pydantic import ConfigDict, StrictBool

from workflows import roles
from workflows.api import lookup
from workflows.api.schemas import ReasonIn
from workflows.outbox import EVENT_TYPES
from workflows.web.pagination import page_by_created
from workflows.webhooks import delivery as webhook_delivery
from workflows.webhooks import endpoints as webhook_endpoints
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint

router = Router()


class WebhookEndpointIn(Schema):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=2048, description="https, or http to a loopback host")
    description: str = Field("", max_length=200)
    enabled: StrictBool = True
    team: str | None = Field(
        None,
        max_length=64,
        description="The team whose plans' events it receives: one of yours; omitted, your only team",
    )


class WebhookEndpointPatchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, min_length=1, max_length=2048)
    description: str | None = Field(None, max_length=200)
    enabled: StrictBool | None = None


class WebhookEndpointOut(Schema):
    id: UUID
    team: str
    url: str
    description: str
    enabled: bool
    created_by: str
    created_at: datetime


class WebhookEndpointCreatedOut(WebhookEndpointOut):
    secret: str = Field(..., description="`whsec_…`: shown this once; it signs every delivery to this endpoint")


class WebhookSecretOut(Schema):
    secret: str = Field(
        ...,
        description="`whsec_…`: shown this once; the previous secret keeps signing beside it "
        "for WEBHOOK_ROTATION_HOURS",
    )


class WebhookEndpointList(Schema):
    items: list[WebhookEndpointOut]


class WebhookDeliveryOut(Schema):
    id: UUID
    webhook_id: str = Field(..., description="The `webhook-id` header: the same on every attempt and replay")
    event: str
    workflow_id: UUID
    endpoint_id: UUID | None = Field(..., description="null: the plan's own callback_url")
    url: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveryPage(Schema):
    items: list[WebhookDeliveryOut]
    next: str | None


def webhook_endpoint_out(endpoint: WebhookEndpoint) -> dict:
    return {
        "id": endpoint.pk,
        "team": endpoint.team.name,
        "url": endpoint.url,
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "created_by": endpoint.created_by.get_username(),
        "created_at": endpoint.created_at,
    }


def webhook_delivery_out(row: WebhookDelivery) -> dict:
    return {
        "id": row.pk,
        "webhook_id": row.webhook_id,
        "event": row.event,
        "workflow_id": row.workflow_id,
        "endpoint_id": row.endpoint_id,
        "url": row.target_url,
        "status": row.status,
        "attempts": row.attempts - row.retry_base,
        "next_attempt_at": row.next_attempt_at,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "created_at": row.created_at,
        "delivered_at": row.delivered_at,
    }


@router.post(
    "/webhooks",
    response={201: WebhookEndpointCreatedOut},
    summary="Register an endpoint for every event of one team's plans (operators); its signing secret is "
    "shown this once",
)
def create_webhook_endpoint(request, payload: WebhookEndpointIn):
    lookup.require(request, roles.OPERATORS)
    endpoint, secret = webhook_endpoints.create(by=request.user, **payload.dict())
    return Status(201, {**webhook_endpoint_out(endpoint), "secret": secret})


@router.get("/webhooks", response=WebhookEndpointList, summary="Webhook endpoints (operators, auditors)")
def list_webhook_endpoints(request):
    lookup.reads(request, "webhooks")
    rows = (
        WebhookEndpoint.objects.visible_to(request.user)
        .select_related("created_by", "team")
        .order_by("created_at", "id")
    )
    return {"items": [webhook_endpoint_out(endpoint) for endpoint in rows]}


@router.get("/webhooks/{endpoint_id}", response=WebhookEndpointOut, summary="One webhook endpoint")
def get_webhook_endpoint(request, endpoint_id: UUID):
    return webhook_endpoint_out(lookup.webhook_endpoint(request, endpoint_id))


@router.patch("/webhooks/{endpoint_id}", response=WebhookEndpointOut, summary="Change an endpoint (operators)")
def patch_webhook_endpoint(request, endpoint_id: UUID, payload: WebhookEndpointPatchIn):
    endpoint = lookup.webhook_endpoint(request, endpoint_id)
    lookup.require(request, roles.OPERATORS)
    changes = {name: value for name, value in payload.dict(exclude_unset=True).items() if value is not None}
    endpoint = webhook_endpoints.update(endpoint, by=request.user, changes=changes)
    return webhook_endpoint_out(endpoint)


@router.post(
    "/webhooks/{endpoint_id}/secret",
    response={201: WebhookSecretOut},
    summary="Rotate an endpoint's signing secret (operators); both sign during the overlap",
)
def rotate_webhook_secret(request, endpoint_id: UUID):
    endpoint = lookup.webhook_endpoint(request, endpoint_id)
    lookup.require(request, roles.OPERATORS)
    secret = webhook_endpoints.rotate_secret(endpoint, by=request.user)
    return Status(201, {"secret": secret})


@router.delete(
    "/webhooks/{endpoint_id}",
    response={204: None},
    summary="Remove an endpoint with its secrets and deliveries (operators)",
)
def delete_webhook_endpoint(request, endpoint_id: UUID):
    endpoint = lookup.webhook_endpoint(request, endpoint_id)
    lookup.require(request, roles.OPERATORS)
    webhook_endpoints.delete(endpoint, by=request.user)
    return Status(204, None)


@router.get(
    "/webhook-deliveries",
    response=WebhookDeliveryPage,
    summary="Webhook deliveries, newest first (operators, auditors); status=DEAD lists the dead-lettered",
)
def list_webhook_deliveries(
    request,
    status: WebhookDelivery.Status | None = None,
    event: str | None = None,
    workflow: UUID | None = None,
    endpoint: UUID | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
):
    lookup.reads(request, "webhooks")
    if event is not None and event not in EVENT_TYPES:
        raise ValidationError([{"loc": ("query", "event"), "msg": f"One of: {', '.join(EVENT_TYPES)}."}])
    rows = WebhookDelivery.objects.visible_to(request.user).select_related("endpoint")
    for name, value in (("status", status), ("event", event), ("workflow_id", workflow), ("endpoint_id", endpoint)):
        if value:
            rows = rows.filter(**{name: value})
    page, next_cursor = page_by_created(rows, cursor, limit)
    return {"items": [webhook_delivery_out(row) for row in page], "next": next_cursor}


@router.post(
    "/webhook-deliveries/{delivery_id}/replay",
    response={202: WebhookDeliveryOut},
    summary="Send a dead-lettered delivery again, same webhook-id and body (operators)",
)
def replay_webhook_delivery(request, delivery_id: UUID, payload: ReasonIn):
    row = lookup.webhook_delivery(request, delivery_id)
    lookup.require(request, roles.OPERATORS)
    row = webhook_delivery.replay(row, by=request.user, reason=payload.reason)
    return Status(202, webhook_delivery_out(row))
