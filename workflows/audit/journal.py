"""The tamper-evident audit trail: append inside the caller's transaction,
verify by recomputing every link.

New links are HMAC-SHA256 under the current audit key (workflows.audit.keys), so
that someone who can write rows but does not hold the key cannot recompute
a chain; rows written before keyed audit stay plain SHA-256 (`hash_alg`
`sha256`) and verify as such. A `sha256` row after a keyed one in its
stream, or beyond what a checkpoint saw of its stream, is a rewrite
without the key: a writer cannot downgrade a stream to unkeyed links.
Signed checkpoints (workflows.audit.checkpoints) pin every stream's head, which
catches a whole stream deleted, truncated or rewritten.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _string
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from workflows.audit import checkpoints, keys
from workflows.audit.identity import fields_for as requester_fields
from workflows.audit.keys import AuditKey
from workflows.audit.redaction import redact
from workflows.db import canonical_json, sha256_hex, update_rows
from workflows.models import AuditEvent, AuditHead, AuditVerification

SYSTEM_STREAM = "system"
GENESIS = "0" * 64


def event_hash(
    prev_hash: str,
    *,
    key: AuditKey | None = None,
    stream,
    seq,
    at,
    actor,
    verb,
    object_type,
    object_id,
    workflow_id,
    data,
    identity: dict | None = None,
) -> str:
    """HMAC-SHA256 under `key` (plain SHA-256 without one: rows written before
    keyed audit) over the previous hash and the event's canonical JSON
    (sorted keys, no spaces): {"actor", "at", "data", "identity",
    "object_id", "object_type", "seq", "stream", "verb", "workflow_id"}.
    `identity` (who was behind the actor: `subject`, `issuer`, `token_id`,
    `client_address`, the non-empty ones) is left out when empty, as it is
    for every event written before it was recorded: their links still
    verify."""
    return _digest(
        key,
        prev_hash,
        stream,
        seq,
        at.isoformat(),
        actor,
        verb,
        object_type,
        str(object_id),
        str(workflow_id) if workflow_id else None,
        canonical_json(data),
        identity_json(identity),
    )


def identity_json(identity: dict | None) -> str:
    """The canonical JSON of an event's non-empty identity fields; "" for none."""
    present = {name: value for name, value in (identity or {}).items() if value}
    return canonical_json(present) if present else ""


def identity_of(event: AuditEvent) -> dict[str, str]:
    return {name: getattr(event, name) for name in IDENTITY_FIELDS if getattr(event, name)}


IDENTITY_FIELDS = ("subject", "issuer", "token_id", "client_address")


def _digest(
    key, prev_hash, stream, seq, at, actor, verb, object_type, object_id, workflow_id, data_json, identity_json=""
) -> str:
    # The canonical JSON of the event, assembled in key order around the
    # data's own canonical JSON (exactly canonical_json of the whole object).
    body = "".join(
        (
            '{"actor":',
            _string(actor),
            ',"at":',
            _string(at),
            ',"data":',
            data_json,
            ',"identity":' + identity_json if identity_json else "",
            ',"object_id":',
            _string(object_id),
            ',"object_type":',
            _string(object_type),
            ',"seq":',
            str(int(seq)),
            ',"stream":',
            _string(stream),
            ',"verb":',
            _string(verb),
            ',"workflow_id":',
            "null" if workflow_id is None else _string(workflow_id),
            "}",
        )
    )
    return key.mac(prev_hash + body) if key is not None else sha256_hex(prev_hash + body)


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
    return append_many([Entry(actor, verb, obj_type, obj_id, workflow_id, data)])[0]


@dataclass(frozen=True)
class Entry:
    actor: object
    verb: str
    obj_type: str
    obj_id: object
    workflow_id: object = None
    data: dict | None = None


def append_many(entries: list[Entry]) -> list[AuditEvent] | None:
    """Append events, in order, to their streams: one lock and one update per
    stream, one insert for them all. Heads are locked in stream order, so
    appenders touching several streams cannot deadlock one another. Returns
    the events, or None where they were copied in without reading ids back."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit events are written inside the transaction of the change they record")
    if not entries:
        return []
    streams = sorted({_stream(entry.workflow_id) for entry in entries})
    heads = _lock_heads(streams)
    missing = [stream for stream in streams if stream not in heads]
    if missing:  # new streams: create each head once, whoever gets there first
        AuditHead.objects.bulk_create([AuditHead(stream=stream) for stream in missing], ignore_conflicts=True)
        heads.update(_lock_heads(missing))
    key = keys.current()
    at = timezone.now()
    at_text = at.isoformat()
    rows = []
    for entry in entries:
        head = heads[_stream(entry.workflow_id)]
        workflow_id = str(entry.workflow_id) if entry.workflow_id else None
        actor = actor_name(entry.actor)
        who = requester_fields(actor)
        row = (
            head.stream,
            head.seq + 1,
            at,
            actor,
            entry.verb,
            entry.obj_type,
            str(entry.obj_id),
            workflow_id,
            canonical_json(redact(entry.data or {})),
            head.hash,
        )
        digest = _digest(key, head.hash, row[0], row[1], at_text, *row[3:9], identity_json(who))
        rows.append((*row, digest, AuditEvent.HMAC_SHA256, key.kid, *(who.get(name, "") for name in IDENTITY_FIELDS)))
        head.seq, head.hash = row[1], digest
    connection = transaction.get_connection()
    if connection.vendor == "postgresql" and len(rows) > 1:
        _copy(connection, rows)  # several times faster than INSERT; the rows' ids are not read back
        events = None
    else:
        # The data is stored as it was hashed: parsed back from its canonical JSON.
        events = [AuditEvent(**dict(zip(COLUMNS, row))) for row in rows]
        for event in events:
            event.data = json.loads(event.data)
        AuditEvent.objects.bulk_create(events)
    update_rows(AuditHead, ["seq", "hash"], list(heads.values()))
    return events


# The columns an event is written with, in order (COPY, bulk_create); what
# it shows (workflows.audit.reading) is its id and these.
COLUMNS = (
    "stream",
    "seq",
    "at",
    "actor",
    "verb",
    "object_type",
    "object_id",
    "workflow_id",
    "data",
    "prev_hash",
    "hash",
    "hash_alg",
    "key_id",
    *IDENTITY_FIELDS,
)


def _copy(connection, rows: list[tuple]) -> None:
    table = AuditEvent._meta.db_table
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _stream(workflow_id) -> str:
    return str(workflow_id) if workflow_id else SYSTEM_STREAM


def _lock_heads(streams: list[str]) -> dict[str, AuditHead]:
    locked = AuditHead.objects.select_for_update().filter(stream__in=streams).order_by("stream")
    return {head.stream: head for head in locked}


# --- verification -------------------------------------------------------------

ALTERED = "altered or inserted row"
MISSING = "missing row"
DELETED_STREAM = "deleted stream"
FORGED_STREAM = "forged or unknown stream"
UNKEYED = "unkeyed rewrite"
UNKNOWN_KEY = "unknown key"
KINDS = (ALTERED, MISSING, DELETED_STREAM, FORGED_STREAM, UNKEYED, UNKNOWN_KEY, checkpoints.BAD_CHECKPOINT)


@dataclass
class VerifyResult:
    events: int = 0
    streams: int = 0
    found: list[tuple[str, str]] = field(default_factory=list)  # (kind, problem), in the order found
    checkpoint: str = ""  # the checkpoint the streams were held to; "" for none
    archived: int = 0  # streams the checkpoints saw that are held to their archive instead
    visited: set[str] = field(default_factory=set, repr=False)

    @property
    def ok(self) -> bool:
        return not self.found

    def first_of_each_kind(self) -> dict[str, tuple[str, int]]:
        """kind → (its first problem, how many of that kind)."""
        first: dict[str, tuple[str, int]] = {}
        for kind, problem in self.found:
            text, count = first.get(kind, (problem, 0))
            first[kind] = (text, count + 1)
        return {kind: first[kind] for kind in KINDS if kind in first}

    @property
    def problems(self) -> list[str]:
        """Every problem, named by its kind, the first of each kind first."""
        leading = [f"{kind}: {text}" for kind, (text, _) in self.first_of_each_kind().items()]
        rest = [f"{kind}: {text}" for kind, text in self.found]
        return leading + [problem for problem in rest if problem not in leading]


def verify(
    streams: Iterable[str] | None = None, *, checkpoint: str | Path | None = None, jwks: str | Path | None = None
) -> VerifyResult:
    """Recompute every link of every stream (or of `streams`), each with its
    own algorithm and key, and hold each stream to the signed checkpoints
    (the stored ones, or the checkpoint file given): a stream they saw must
    still reach each seq they saw with the same head. One ordered scan of the
    events, however many streams."""
    # Read before the heads: a head only moves forward, so every pin is behind it.
    pins = checkpoints.file_pins(Path(checkpoint), jwks and Path(jwks)) if checkpoint else checkpoints.stored_pins()
    result = VerifyResult(found=list(pins.problems), checkpoint=pins.label)
    wanted = None if streams is None else set(streams)
    heads = AuditHead.objects.all()
    events = AuditEvent.objects.order_by("stream", "seq")
    if wanted is not None:
        heads, events = heads.filter(stream__in=wanted), events.filter(stream__in=wanted)
    heads = {head.stream: head for head in heads}
    result.streams = len(heads)
    check = None
    for event in events.iterator(chunk_size=5000):
        if check is None or check.stream != event.stream:
            if check is not None:
                check.finish()
            check = _StreamCheck(event.stream, heads.pop(event.stream, None), pins, result)
        check.add(event)
    if check is not None:
        check.finish()
    for head in heads.values():  # heads whose events are all gone
        _StreamCheck(head.stream, head, pins, result).finish()
    archived = archived_heads() if set(pins.heads) - result.visited else {}
    for stream in sorted(set(pins.heads) - result.visited):
        if wanted is None or stream in wanted:
            if _archived_at_or_beyond(archived.get(stream), pins.heads[stream]):
                result.archived += 1
                continue
            result.found.append(
                (
                    DELETED_STREAM,
                    f"{stream}: deleted: {pins.label} saw it up to seq {pins.last_seq(stream)}, its head is gone",
                )
            )
    return result


ARCHIVED = "audit.archived"


def archived_heads() -> dict[str, tuple[int, str]]:
    """Each archived stream's head as the `audit.archived` events of the
    system stream record it (docs/explanation/operations-at-scale.md#operations-at-scale): an archive moved the stream
    out of the tables after these events were chained, so its absence is no
    deletion. The events are themselves links of the keyed system chain:
    a forged one does not verify."""
    heads: dict[str, tuple[int, str]] = {}
    events = AuditEvent.objects.filter(stream=SYSTEM_STREAM, verb=ARCHIVED).order_by("seq")
    for data in events.values_list("data", flat=True).iterator(chunk_size=20):
        for stream, seq, head in data.get("heads", []):
            if seq >= heads.get(stream, (0, ""))[0]:
                heads[stream] = (seq, head)
    return heads


def _archived_at_or_beyond(archived: tuple[int, str] | None, pinned: dict[int, str]) -> bool:
    """The archive took the stream at least as far as every checkpoint saw
    it, through the same head where they saw the same seq."""
    if archived is None:
        return False
    seq, head = archived
    return seq >= max(pinned) and pinned.get(seq, head) == head


class _StreamCheck:
    """The links of one stream, fed in seq order up to its head as read
    when verification began (later events are checked next time)."""

    def __init__(self, stream: str, head: AuditHead | None, pins: checkpoints.Pins, result: VerifyResult):
        self.stream, self.head, self.pins, self.result = stream, head, pins, result
        self.pinned = pins.heads.get(stream, {})
        self.last_pin = pins.last_seq(stream)
        self.prev, self.expected_seq, self.keyed = GENESIS, 1, False
        self.beyond: AuditEvent | None = None
        self.headless = 0
        result.visited.add(stream)

    def add(self, event: AuditEvent) -> None:
        if self.head is None:
            self.headless += 1
            return
        if event.seq > self.head.seq:
            self.beyond = event
            return
        self.result.events += 1
        found, stream = self.result.found, self.stream
        where = f"{stream}: event {event.pk} (seq {event.seq})"
        if event.seq != self.expected_seq:
            found.append((MISSING, f"{stream}: expected seq {self.expected_seq}, found {event.seq} (event {event.pk})"))
        elif event.prev_hash != self.prev:
            found.append((ALTERED, f"{where} does not link to the previous event"))
        key = None
        if event.hash_alg == AuditEvent.HMAC_SHA256:
            self.keyed = True
            key = keys.by_id(event.key_id)
            if key is None:
                found.append(
                    (UNKNOWN_KEY, f"{where} is sealed with key {event.key_id!r}, which AUDIT_KEYS does not list")
                )
        elif event.hash_alg != AuditEvent.SHA256:
            found.append((ALTERED, f"{where} names an unknown hash algorithm {event.hash_alg!r}"))
        elif self.keyed:
            found.append((UNKEYED, f"{where} is plain sha256 after keyed events: rewritten without the key"))
        elif self.pins.label and not self.pinned:
            found.append(
                (
                    FORGED_STREAM,
                    f"{where} is plain sha256 in a stream {self.pins.label} never saw: a stream made without the key",
                )
            )
        elif self.pins.label and event.seq > self.last_pin:
            found.append(
                (
                    UNKEYED,
                    f"{where} is plain sha256 beyond seq {self.last_pin}, the last that "
                    f"{self.pins.label} saw of this stream: written without the key",
                )
            )
        if (key is not None or event.hash_alg == AuditEvent.SHA256) and event.hash != event_hash(
            event.prev_hash,
            key=key,
            stream=event.stream,
            seq=event.seq,
            at=event.at,
            actor=event.actor,
            verb=event.verb,
            object_type=event.object_type,
            object_id=event.object_id,
            workflow_id=event.workflow_id,
            data=event.data,
            identity=identity_of(event),
        ):
            found.append((ALTERED, f"{where} was altered (hash mismatch)"))
        if self.pinned.get(event.seq, event.hash) != event.hash:
            found.append((ALTERED, f"{where} is not the event {self.pins.label} signed: history rewritten"))
        self.prev, self.expected_seq = event.hash, event.seq + 1

    def finish(self) -> None:
        found, stream = self.result.found, self.stream
        now_head = None
        if self.headless or self.beyond is not None:
            now_head = AuditHead.objects.filter(stream=stream).values_list("seq", flat=True).first()
        if self.headless:
            if now_head is None:  # not a stream that began while this ran
                found.append(
                    (
                        FORGED_STREAM,
                        f"{stream}: {self.headless} event(s) in a stream with no head (a "
                        "stream the trail never started)",
                    )
                )
            return
        last = self.expected_seq - 1
        if self.last_pin > last:
            kind = DELETED_STREAM if last == 0 else MISSING
            found.append(
                (kind, f"{stream}: {self.pins.label} saw it up to seq {self.last_pin}, the chain ends at seq {last}")
            )
        if self.head.seq != last or self.head.hash != self.prev:
            kind = DELETED_STREAM if last == 0 else MISSING
            found.append((kind, f"{stream}: chain ends at seq {last} but its head says {self.head.seq}"))
        if self.beyond is not None and self.beyond.seq > (now_head or 0):
            found.append(
                (ALTERED, f"{stream}: event {self.beyond.pk} lies beyond the chain's head (inserted around it)")
            )


def record_verification(*, by: str, streams: list[str] | None = None, checkpoint=None, jwks=None) -> AuditVerification:
    """Recompute the chain (every stream, or only `streams`), hold it to
    the signed checkpoints (or the checkpoint file given) and record the
    outcome, the first problem of each kind first. The full result is
    left on the record as `result`."""
    started = timezone.now()
    result = verify(streams, checkpoint=checkpoint, jwks=jwks)
    problems = result.problems
    record = AuditVerification.objects.create(
        at=started,
        by=by,
        scope=",".join(streams or []),
        ok=result.ok,
        events=result.events,
        streams=result.streams,
        problem_count=len(problems),
        problems=problems[: AuditVerification.MAX_PROBLEMS],
        seconds=(timezone.now() - started).total_seconds(),
    )
    record.result = result
    return record
