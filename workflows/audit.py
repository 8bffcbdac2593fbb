"""The tamper-evident audit trail: append inside the caller's transaction,
verify by recomputing every link."""

import json
from dataclasses import dataclass
from typing import Iterable

from django.db import transaction
from django.utils import timezone

from workflows.models import AuditEvent, AuditHead, canonical_json, sha256_hex
from workflows.redaction import redact

SYSTEM_STREAM = "system"
GENESIS = "0" * 64


def event_hash(prev_hash: str, *, stream, seq, at, actor, verb, object_type, object_id, workflow_id, data) -> str:
    body = canonical_json(
        {
            "stream": stream,
            "seq": seq,
            "at": at.isoformat(),
            "actor": actor,
            "verb": verb,
            "object_type": object_type,
            "object_id": str(object_id),
            "workflow_id": str(workflow_id) if workflow_id else None,
            "data": data,
        }
    )
    return sha256_hex(prev_hash + body)


def actor_name(actor) -> str:
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    return actor.get_username()


def append(*, actor, verb: str, obj_type: str, obj_id, workflow_id=None, data: dict | None = None) -> AuditEvent:
    """Append one event to its stream. Must run inside a transaction: the head
    row lock orders concurrent appends and the event commits with the change
    it records."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit events are written inside the transaction of the change they record")
    stream = str(workflow_id) if workflow_id else SYSTEM_STREAM
    head = AuditHead.objects.select_for_update().filter(stream=stream).first()
    if head is None:  # a new stream: create its head once, whoever gets there first
        AuditHead.objects.bulk_create([AuditHead(stream=stream)], ignore_conflicts=True)
        head = AuditHead.objects.select_for_update().get(stream=stream)
    fields = {
        "stream": stream,
        "seq": head.seq + 1,
        "at": timezone.now(),
        "actor": actor_name(actor),
        "verb": verb,
        "object_type": obj_type,
        "object_id": str(obj_id),
        "workflow_id": workflow_id,
        "data": redact(data or {}),
    }
    # Round-trip through JSON so the hash covers exactly what the row stores.
    fields["data"] = json.loads(canonical_json(fields["data"]))
    digest = event_hash(head.hash, **fields)
    event = AuditEvent.objects.create(prev_hash=head.hash, hash=digest, **fields)
    AuditHead.objects.filter(stream=stream).update(seq=fields["seq"], hash=digest)
    return event


@dataclass
class VerifyResult:
    ok: bool
    events: int
    streams: int
    problems: list[str]


def verify(streams: Iterable[str] | None = None) -> VerifyResult:
    """Recompute every chain; report each broken link, gap or missing tail."""
    problems: list[str] = []
    heads = AuditHead.objects.all()
    if streams is not None:
        heads = heads.filter(stream__in=list(streams))
    checked = 0
    stream_count = 0
    for head in heads.iterator():
        stream_count += 1
        prev, expected_seq = GENESIS, 1
        # Only up to the head read above: events appended while this runs are
        # checked next time, not reported as a broken tail.
        events = AuditEvent.objects.filter(stream=head.stream, seq__lte=head.seq).order_by("seq")
        for event in events.iterator(chunk_size=2000):
            checked += 1
            if event.seq != expected_seq:
                problems.append(f"{head.stream}: expected seq {expected_seq}, found {event.seq} (event {event.pk})")
            if event.prev_hash != prev:
                problems.append(f"{head.stream}: event {event.pk} does not link to the previous event")
            recomputed = event_hash(
                event.prev_hash,
                stream=event.stream,
                seq=event.seq,
                at=event.at,
                actor=event.actor,
                verb=event.verb,
                object_type=event.object_type,
                object_id=event.object_id,
                workflow_id=event.workflow_id,
                data=event.data,
            )
            if recomputed != event.hash:
                problems.append(f"{head.stream}: event {event.pk} was altered (hash mismatch)")
            prev, expected_seq = event.hash, event.seq + 1
        if head.seq != expected_seq - 1 or head.hash != prev:
            problems.append(f"{head.stream}: chain ends at seq {expected_seq - 1} but its head says {head.seq}")
        beyond = AuditEvent.objects.filter(stream=head.stream, seq__gt=head.seq).order_by("-seq").first()
        if beyond is not None:
            now_head = AuditHead.objects.filter(stream=head.stream).values_list("seq", flat=True).first() or 0
            if beyond.seq > now_head:
                problems.append(f"{head.stream}: event {beyond.pk} lies beyond the chain's head (inserted around it)")
    return VerifyResult(ok=not problems, events=checked, streams=stream_count, problems=problems)
