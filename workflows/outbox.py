"""The outbox: each event becomes one delivery row per receiver, written in
the transaction of the change it reports, so an event is sent if and only
if its change committed. The workers send the rows
(`workflows.webhooks.delivery`); the engine and the operations only call
down into this module, and it imports neither them nor the sending.

An event type is declared by one line: in `WORKFLOW_STATUS_EVENTS` when
it is a workflow reaching a status (emitted by `transitions.move`), or in
`OTHER_EVENTS` when an operation emits it itself (`emit`). The caller
passes the `shape` that renders the workflow in the event's `data` (the
API's, `workflows.shapes.workflow_out`): that shape reads the engine's
gates, which sit above the outbox.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from workflows import queue
from workflows.models import Team, Workflow
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint

WORKFLOW_STATUS_EVENTS = {
    "APPROVED": "workflow.approved",
    "REJECTED": "workflow.rejected",
    "WAITING_GATE": "workflow.waiting_gate",
    "COMPLETE": "workflow.complete",
    "FAILED": "workflow.failed",
    "NEEDS_ATTENTION": "workflow.needs_attention",
    "EXPIRED": "workflow.expired",
    "COMPENSATED": "workflow.compensated",
}
OTHER_EVENTS = (
    "workflow.revised",
    "workflow.escalated",
    "step.dead_lettered",
)
EVENT_TYPES = (*WORKFLOW_STATUS_EVENTS.values(), *OTHER_EVENTS)


Shape = Callable[[Workflow], dict]


def workflows_moved(workflows: list[Workflow], status: str, *, shape: Shape) -> int:
    """Emit the event of this status (if it has one) for these workflows,
    as the caller moved them. Runs inside the transaction that moved them."""
    event = WORKFLOW_STATUS_EVENTS.get(status)
    if event is None:
        return 0
    return _emit(event, [workflow.pk for workflow in workflows], shape, keyed=_keyed(workflows))


def emit(event: str, workflow_id, extra: dict | None = None, *, shape: Shape) -> int:
    """Emit `event` about one workflow; `extra` joins the workflow in `data`.
    Runs inside the transaction of the change it reports."""
    if event not in EVENT_TYPES:
        raise ValueError(f"undeclared webhook event {event!r}")
    return _emit(event, [workflow_id], shape, extra)


def _keyed(workflows: list[Workflow]) -> list[tuple] | None:
    """`(id, team id, callback URL)` of workflows in hand, both set at
    submission and never changed; None if a caller's rows left either out."""
    if any({"team_id", "callback_url"} & workflow.get_deferred_fields() for workflow in workflows):
        return None
    return [(workflow.pk, workflow.team_id, workflow.callback_url) for workflow in workflows]


def _emit(event: str, workflow_ids: list, shape: Shape, extra: dict | None = None, keyed=None) -> int:
    # Read by key alone, team and callback compared here: with the team in
    # the query and no planner statistics, the team's index could be read
    # whole (every plan of the team) for a few plans.
    if keyed is None:
        keyed = list(Workflow.objects.filter(pk__in=workflow_ids).values_list("pk", "team_id", "callback_url"))
    # Each endpoint hears only the plans of its team (docs/explanation/teams.md#teams).
    endpoints = defaultdict(list)
    for pk, team_id in WebhookEndpoint.objects.filter(
        enabled=True, team_id__in={team_id for _, team_id, _ in keyed}
    ).values_list("pk", "team_id"):
        endpoints[team_id].append(pk)
    callbacks = {pk: url for pk, _, url in keyed if url}
    # Only the workflows someone listens to are read in full.
    listened = [pk for pk, team_id, url in keyed if url or team_id in endpoints]
    if not listened:
        return 0
    now = timezone.now()
    rows = []
    # The teams' names by their keys, apart: joined to the plans, the planner
    # without statistics may start from the team and read its index of plans.
    teams = Team.objects.in_bulk({team_id for pk, team_id, _ in keyed if pk in listened})
    for workflow in (
        Workflow.objects.filter(pk__in=listened)
        .select_related("submitted_by")
        .prefetch_related("steps__attempts", "steps__compensates")
    ):
        workflow.team = teams[workflow.team_id]
        body = json.dumps(
            {
                "type": event,
                "timestamp": now.isoformat().replace("+00:00", "Z"),
                "data": {"workflow": shape(workflow), **(extra or {})},
            },
            cls=DjangoJSONEncoder,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        rows += [
            WebhookDelivery(
                event=event, workflow=workflow, endpoint_id=pk, body=body, next_attempt_at=now, created_at=now
            )
            for pk in endpoints.get(workflow.team_id, ())
        ]
        if workflow.pk in callbacks:
            rows.append(
                WebhookDelivery(
                    event=event,
                    workflow=workflow,
                    url=callbacks[workflow.pk],
                    signer_id=workflow.submitted_by_id,
                    body=body,
                    next_attempt_at=now,
                    created_at=now,
                )
            )
    WebhookDelivery.objects.bulk_create(rows)
    queue.enqueue("workflows.tasks.deliver_webhooks", name="deliver webhooks")
    return len(rows)
