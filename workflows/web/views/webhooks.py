"""The webhooks console: endpoints, their deliveries, and replaying the dead.

The same rules as the API's webhook endpoints: operators and auditors see
the endpoints and deliveries of their teams, only operators replay; to
anyone else, and for another team's, they do not exist (404). A replay
goes through `workflows.webhooks.delivery.replay`, which needs a reason,
records it in the audit trail and sends the same webhook-id and body again.
"""

from urllib.parse import urlencode
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from workflows import roles
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act, list_page, reads
from workflows.webhooks import delivery as webhook_delivery
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint

PAGE_SIZE = 50
ALL_STATUSES = "all"
Status = WebhookDelivery.Status


def _get_endpoint(request: HttpRequest, endpoint_id: UUID) -> WebhookEndpoint:
    reads(request, "webhooks")
    return get_object_or_404(
        WebhookEndpoint.objects.visible_to(request.user).select_related("team", "created_by"), pk=endpoint_id
    )


def _get_delivery(request: HttpRequest, delivery_id: UUID, *, replay: bool = False) -> WebhookDelivery:
    """The delivery if the user sees it (403 for a role that reads none, 404
    otherwise, `visible_to` decides); seeing it, only an operator replays it (403)."""
    reads(request, "webhooks")
    row = get_object_or_404(
        WebhookDelivery.objects.visible_to(request.user).select_related("endpoint", "workflow"), pk=delivery_id
    )
    if replay and not roles.is_operator(request.user):
        raise PermissionDenied("Only operators can replay deliveries.")
    return row


@login_required
@require_GET
def webhook_list(request: HttpRequest) -> HttpResponse:
    reads(request, "webhooks")
    endpoints = (
        WebhookEndpoint.objects.visible_to(request.user).select_related("team", "created_by").order_by("created_at")
    )
    dead = WebhookDelivery.objects.visible_to(request.user).filter(status=Status.DEAD)
    return render(request, "workflows/webhook_list.html", {"endpoints": endpoints, "dead": dead.count()})


@login_required
@require_GET
def webhook_detail(request: HttpRequest, endpoint_id: UUID) -> HttpResponse:
    endpoint = _get_endpoint(request, endpoint_id)
    deliveries = WebhookDelivery.objects.visible_to(request.user).filter(endpoint=endpoint)
    counts = {status: deliveries.filter(status=status).count() for status in Status.values}
    return render(request, "workflows/webhook_detail.html", {"endpoint": endpoint, "counts": counts})


@login_required
@require_GET
@vary_on_headers("HX-Request")
def webhook_delivery_list(request: HttpRequest) -> HttpResponse:
    """Dead-lettered deliveries by default, newest first; one endpoint's
    when `endpoint` names it."""
    reads(request, "webhooks")
    status = request.GET.get("status") or Status.DEAD
    rows = WebhookDelivery.objects.visible_to(request.user).select_related("endpoint", "workflow")
    if status in Status.values:
        rows = rows.filter(status=status)
    elif status != ALL_STATUSES:
        return HttpResponseBadRequest("Unknown status.")
    endpoint = None
    if request.GET.get("endpoint"):
        try:
            endpoint = _get_endpoint(request, UUID(request.GET["endpoint"]))
        except ValueError:
            return HttpResponseBadRequest("Unknown endpoint.")
        rows = rows.filter(endpoint=endpoint)
    query = {"status": status, **({"endpoint": str(endpoint.pk)} if endpoint else {})}
    return list_page(
        request,
        rows,
        "workflows/webhook_delivery_list.html",
        rows="deliveries",
        page_size=PAGE_SIZE,
        context={
            "status": status,
            "statuses": [*Status.values, ALL_STATUSES],
            "endpoint": endpoint,
            "query": urlencode(query),
        },
    )


def _detail_context(request: HttpRequest, row: WebhookDelivery) -> dict:
    return {
        "delivery": row,
        "attempts": row.attempts - row.retry_base,
        "can_replay": roles.is_operator(request.user) and row.status == Status.DEAD,
    }


@login_required
@require_GET
def webhook_delivery_detail(request: HttpRequest, delivery_id: UUID) -> HttpResponse:
    row = _get_delivery(request, delivery_id)
    return render(request, "workflows/webhook_delivery_detail.html", _detail_context(request, row))


@login_required
@require_POST
@needs_recent_sign_in(back="webhook_delivery_detail")
def webhook_delivery_replay(request: HttpRequest, delivery_id: UUID) -> HttpResponse:
    row = _get_delivery(request, delivery_id, replay=True)

    def detail() -> HttpResponse:
        fresh = _get_delivery(request, delivery_id)
        return render(request, "workflows/webhook_delivery_detail.html#detail", _detail_context(request, fresh))

    return act(
        request,
        lambda: webhook_delivery.replay(row, by=request.user, reason=request.POST.get("reason", "")),
        done=f"Replayed: {row.event} to {row.target_url} ({str(row.pk)[:8]})",
        back=reverse("webhook_delivery_detail", kwargs={"delivery_id": row.pk}),
        partial=detail,
    )
