"""Reading the audit trail, the same for the console's list and exports
and the API: which events a user may see that match a filter, and one
event as a row (the exports' columns and the API's fields)."""

from datetime import UTC, datetime
from uuid import UUID

from django.utils import timezone

from workflows.audit import journal
from workflows.models import AuditEvent

# What an event shows: its id, then the columns it is stored (and hashed) with.
FIELDS = ("id", *journal.COLUMNS)


def select_events(
    user,
    *,
    actor: str = "",
    verb: str = "",
    workflow: UUID | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
):
    """The audit events `user` may see that match the filter: `since`
    inclusive, `until` exclusive, naive times read as UTC."""
    events = AuditEvent.objects.visible_to(user)
    if actor:
        events = events.filter(actor=actor)
    if verb:
        events = events.filter(verb=verb)
    if workflow:
        events = events.filter(workflow_id=workflow)
    if since:
        events = events.filter(at__gte=utc(since))
    if until:
        events = events.filter(at__lt=utc(until))
    return events


def utc(moment: datetime) -> datetime:
    """The moment in UTC. ISO 8601 allows offsets up to ±23:59 and
    PostgreSQL only ±15:59, so an aware moment is converted, not passed on;
    one whose UTC form falls outside the calendar lies before or after every
    event, like the calendar's first or last instant."""
    if timezone.is_naive(moment):
        return timezone.make_aware(moment, UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        edge = datetime.max if moment.year == datetime.max.year else datetime.min
        return edge.replace(tzinfo=UTC)


def event_row(event: AuditEvent) -> dict:
    """One event as exports and the API give it: `at` in full ISO-8601 UTC
    (microseconds kept), so anyone can recompute the hash chain from it."""
    return {
        "id": event.pk,
        "stream": event.stream,
        "seq": event.seq,
        "at": event.at.astimezone(UTC).isoformat(),
        "actor": event.actor,
        "verb": event.verb,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "workflow_id": str(event.workflow_id) if event.workflow_id else None,
        "data": event.data,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "hash_alg": event.hash_alg,
        "key_id": event.key_id,
        # Who was behind the actor (hashed with the event when present).
        **{name: getattr(event, name) for name in journal.IDENTITY_FIELDS},
    }
