"""Retention with a verifiable archive (docs/explanation/operations-at-scale.md#operations-at-scale).

`write` moves finished workflows out of the tables in four moves:

1. Every row of each chosen workflow (its steps, attempts, traces, dead
   letters, approvals, revisions, gate decisions, notices, used review
   links, compensations, webhook deliveries and its audit stream) is
   written to compressed JSON Lines, one file per table, and a manifest
   (counts, SHA-256 of each file, each archived stream's audit head) is
   signed with the Ed25519 signing key (workflows.audit.signing).
2. `audit.archived` events in the live system stream carry the manifest's
   digest and the archived heads (at most `batch` heads each, so that no
   event grows with the archive), and a fresh signed checkpoint follows
   them (also saved beside the files): from then on verification holds an
   archived stream to its archive, not to the tables.
3. The rows are deleted, `batch` workflows per short transaction. A
   workflow that changed since it was written out (a compensation
   requested, an event appended) or whose row is locked right now is kept
   (PostgreSQL: SKIP LOCKED): the archive then holds an older copy, which
   is harmless, and nothing anyone is working on is ever removed or
   waited for. On PostgreSQL the audit trigger lets a stream's events be
   deleted only inside that transaction, after it recorded the workflow
   as archived (migration 0026); on SQLite the model refuses every
   delete and only this module deletes, by SQL.
4. ANALYZE on the touched tables.

Reading an archive back (`verify`, `restore`) is `workflows.audit.archived`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from workflows.audit import checkpoints, journal, signing
from workflows.db import canonical_json
from workflows.models import (
    Approval,
    Archive,
    ArchivedWorkflow,
    Attempt,
    AuditEvent,
    AuditHead,
    ChatMessage,
    Compensation,
    DeadLetter,
    GateApproval,
    PlanRevision,
    ReviewNotice,
    Step,
    Team,
    Trace,
    UsedReviewLink,
    WebhookDelivery,
    Workflow,
)
from workflows.states import TERMINAL_WORKFLOW, AttemptStatus, CompensationStatus, StepStatus

VERSION = 1
TYPE = "durable-console-archive"
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint.json"
ARCHIVED = journal.ARCHIVED
DEFAULT_BATCH = 1000
MAX_BATCH = 10000
# The PostgreSQL setting the audit trigger reads (migration 0026).
SETTING = "durableconsole.archive"


@dataclass(frozen=True)
class Table:
    """One file of the archive: a table's rows of the archived workflows."""

    file: str
    model: type
    # The rows of these workflows (ids, and their streams for the audit).
    rows: Callable[[list, list[str]], object]
    # The column naming the row's workflow (for completeness checks); "" for
    # rows reached through their step.
    workflow_column: str = "workflow_id"


def _by_workflow(model):
    return lambda ids, streams: model.objects.filter(workflow_id__in=ids)


# Parents before children: restore inserts in this order, archive deletes in reverse.
TABLES = (
    Table("workflows.jsonl.gz", Workflow, lambda ids, streams: Workflow.objects.filter(pk__in=ids), "id"),
    Table("compensations.jsonl.gz", Compensation, _by_workflow(Compensation)),
    Table("steps.jsonl.gz", Step, _by_workflow(Step)),
    Table("attempts.jsonl.gz", Attempt, lambda ids, streams: Attempt.objects.filter(step__workflow_id__in=ids), ""),
    Table("traces.jsonl.gz", Trace, lambda ids, streams: Trace.objects.filter(step__workflow_id__in=ids), ""),
    Table("dead_letters.jsonl.gz", DeadLetter, _by_workflow(DeadLetter)),
    Table("approvals.jsonl.gz", Approval, _by_workflow(Approval)),
    Table("plan_revisions.jsonl.gz", PlanRevision, _by_workflow(PlanRevision)),
    Table("gate_approvals.jsonl.gz", GateApproval, _by_workflow(GateApproval)),
    Table("review_notices.jsonl.gz", ReviewNotice, _by_workflow(ReviewNotice)),
    Table("used_review_links.jsonl.gz", UsedReviewLink, _by_workflow(UsedReviewLink)),
    Table("webhook_deliveries.jsonl.gz", WebhookDelivery, _by_workflow(WebhookDelivery)),
    Table("chat_messages.jsonl.gz", ChatMessage, _by_workflow(ChatMessage)),
    Table("audit_events.jsonl.gz", AuditEvent, lambda ids, streams: AuditEvent.objects.filter(stream__in=streams)),
)
FILES = {table.file: table for table in TABLES}


class ArchiveError(Exception):
    """An archive that cannot be written, read or restored as asked."""


# --- rows as JSON -------------------------------------------------------------


def _json_value(value):
    if isinstance(value, datetime | date):
        return value.isoformat()  # full precision: audit links hash `at.isoformat()`
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return value


def _columns(model) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def _rows(queryset, model) -> Iterator[dict]:
    names = _columns(model)
    for values in queryset.order_by("pk").values_list(*names).iterator(chunk_size=2000):
        yield {name: _json_value(value) for name, value in zip(names, values)}


# --- choosing what to archive ----------------------------------------------------


def cutoffs(older_than: timedelta | None, now: datetime) -> dict[int, datetime]:
    """team id → the cutoff of its plans: `older_than` for every team when
    given, else each team's `retention_days` (teams without one are kept)."""
    if older_than is not None:
        return {pk: now - older_than for pk in Team.objects.values_list("pk", flat=True)}
    return {
        pk: now - timedelta(days=days)
        for pk, days in Team.objects.filter(retention_days__isnull=False).values_list("pk", "retention_days")
    }


def candidates(team_cutoffs: dict[int, datetime]):
    """Finished workflows last changed before their team's cutoff, with
    nothing left in flight: no step running or being verified, no attempt
    whose outcome is still being learned, no open dead letter or pending
    compensation (a person may still act on those), no webhook still to
    deliver, no chat message still to update. Restored ones are in their archive already."""
    if not team_cutoffs:
        return Workflow.objects.none()
    by_team = Q()
    for team_id, cutoff in team_cutoffs.items():
        by_team |= Q(team_id=team_id, updated_at__lt=cutoff)
    workflow = OuterRef("pk")
    busy = (
        Exists(Step.objects.filter(workflow=workflow, status__in=[StepStatus.RUNNING, StepStatus.VERIFYING]))
        | Exists(
            Attempt.objects.filter(step__workflow=workflow, status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN])
        )
        | Exists(DeadLetter.objects.filter(workflow=workflow, status=DeadLetter.Status.OPEN))
        | Exists(
            Compensation.objects.filter(
                workflow=workflow,
                status__in=[CompensationStatus.REQUESTED, CompensationStatus.AUTHORIZED, CompensationStatus.RUNNING],
            )
        )
        | Exists(WebhookDelivery.objects.filter(workflow=workflow, status=WebhookDelivery.Status.PENDING))
        | Exists(ChatMessage.objects.pending().filter(workflow=workflow))
    )
    return (
        Workflow.objects.filter(by_team, status__in=TERMINAL_WORKFLOW, restored_at__isnull=True)
        .exclude(busy)
        .order_by("created_at", "id")
    )


# --- writing ----------------------------------------------------------------------


@dataclass
class Written:
    archive: Archive | None
    directory: Path
    workflows: int = 0
    deleted: int = 0
    kept: list[str] = field(default_factory=list)  # written out, then changed: left in the tables
    counts: dict[str, int] = field(default_factory=dict)
    digest: str = ""


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def write(
    directory: Path,
    *,
    older_than: timedelta | None,
    batch: int = DEFAULT_BATCH,
    by: str = "archive",
    progress: Callable[[str], None] = lambda text: None,
) -> Written:
    if not 1 <= batch <= MAX_BATCH:
        raise ArchiveError(f"--batch must be between 1 and {MAX_BATCH}")
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise ArchiveError(f"{directory} is not empty: give a new directory for each archive")
    now = timezone.now()
    team_cutoffs = cutoffs(older_than, now)
    ids = list(candidates(team_cutoffs).values_list("pk", flat=True))
    done = Written(None, directory)
    if not ids:
        progress("Nothing to archive.")
        return done
    directory.mkdir(parents=True, exist_ok=True)
    archive_id = uuid.uuid4()

    # 1. The files, `batch` workflows at a time: memory stays bounded.
    seen: dict[str, tuple] = {}  # workflow id → (status, updated_at) as written out
    heads: list[list] = []
    kids: set[str] = set()
    files = {table.file: _FileWriter(directory / table.file) for table in TABLES}
    try:
        for chunk in _chunks(ids, batch):
            streams = [str(pk) for pk in chunk]
            # Heads before events: an event appended meanwhile lies beyond
            # the head and is left out, as the stream was at its head.
            chunk_heads = {head.stream: head for head in AuditHead.objects.filter(stream__in=streams)}
            for table in TABLES:
                out = files[table.file]
                for row in _rows(table.rows(chunk, streams), table.model):
                    if table.model is AuditEvent:
                        head = chunk_heads.get(row["stream"])
                        if head is None or row["seq"] > head.seq:
                            continue
                        kids.add(row["key_id"])
                    elif table.model is Workflow:
                        seen[row["id"]] = (row["status"], row["updated_at"])
                    out.add(row)
            heads += [
                [stream, chunk_heads[stream].seq, chunk_heads[stream].hash]
                for stream in streams
                if stream in chunk_heads
            ]
            progress(f"written {len(seen)} of {len(ids)} workflows")
    finally:
        for out in files.values():
            out.close()
    heads.sort()
    key = signing.current()
    statement = {
        "v": VERSION,
        "type": TYPE,
        "alg": "EdDSA",
        "kid": key.kid,
        "archive": str(archive_id),
        "created_at": now.isoformat(),
        "by": by,
        "rule": (
            {"older_than_seconds": older_than.total_seconds()}
            if older_than is not None
            else {
                "team_retention_days": dict(
                    Team.objects.filter(pk__in=team_cutoffs).values_list("name", "retention_days")
                )
            }
        ),
        "workflows": len(seen),
        "counts": {name: out.rows for name, out in files.items()},
        "files": {name: {"sha256": out.sha256, "bytes": out.size, "rows": out.rows} for name, out in files.items()},
        "heads": heads,
        # Which audit keys a verifier needs (ids only; "" is plain SHA-256).
        "audit_keys": sorted(kid for kid in kids if kid),
    }
    data = canonical_json(statement).encode()
    digest = hashlib.sha256(data).hexdigest()
    checkpoints.save({"statement": statement, "signature": key.sign(data)}, directory / MANIFEST)
    done.workflows, done.counts, done.digest = len(seen), statement["counts"], digest

    # 2. The live chain learns of the archive before anything is deleted.
    with transaction.atomic():
        archive = Archive.objects.create(
            id=archive_id,
            created_at=now,
            by=by,
            location=str(directory.resolve()),
            manifest_digest=digest,
            workflows=len(seen),
        )
        parts = max(1, -(-len(heads) // batch))
        journal.append_many(
            [
                journal.Entry(
                    by,
                    ARCHIVED,
                    "archive",
                    archive_id,
                    None,
                    {
                        "archive": str(archive_id),
                        "manifest_sha256": digest,
                        "workflows": len(seen),
                        "part": number,
                        "parts": parts,
                        "heads": part,
                    },
                )
                for number, part in enumerate(_chunks(heads, batch) if heads else [[]], start=1)
            ]
        )
    checkpoints.save(checkpoints.write_now(full=True).full, directory / CHECKPOINT)
    done.archive = archive
    progress(f"manifest {digest} signed and recorded in the live audit chain")

    # 3. Delete, one short transaction per batch.
    head_of = {stream: (seq, hash_) for stream, seq, hash_ in heads}
    for chunk in _chunks(ids, batch):
        removed, kept = _delete(archive, chunk, seen, head_of)
        done.deleted += removed
        done.kept += kept
        progress(f"deleted {done.deleted} of {len(ids)} workflows")
    Archive.objects.filter(pk=archive.pk).update(deleted=done.deleted, finished_at=timezone.now())

    # 4. The planner's statistics of tables that just lost many rows.
    with connection.cursor() as cursor:
        for table in (*TABLES, None):
            model = table.model if table else AuditHead
            cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")
    return done


class _FileWriter:
    """A gzip JSON Lines file, its digest and row count. No timestamp in
    the gzip header: the same rows make the same bytes."""

    def __init__(self, path: Path):
        self.path, self.rows = path, 0
        self.raw = open(path, "wb")
        self.gzip = gzip.GzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0)

    def add(self, row: dict) -> None:
        self.gzip.write(canonical_json(row).encode() + b"\n")
        self.rows += 1

    def close(self) -> None:
        if self.gzip is None:
            return
        self.gzip.close()
        self.raw.close()
        self.gzip = None
        self.size = self.path.stat().st_size
        self.sha256 = file_sha256(self.path)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as raw:
        for block in iter(lambda: raw.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_rows(path: Path) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)


def _delete(archive: Archive, chunk: list, seen: dict, head_of: dict) -> tuple[int, list[str]]:
    """Delete the rows of the workflows of `chunk` that are as they were
    written out, in one transaction; return (deleted, kept)."""
    postgres = connection.vendor == "postgresql"
    with transaction.atomic():
        lock = Workflow.objects.filter(pk__in=chunk).order_by("pk")
        if postgres:
            lock = lock.select_for_update(skip_locked=True, of=("self",))
        rows = {
            str(pk): (pk, status, updated_at, team_id, submitted_by_id, name, created_at)
            for pk, status, updated_at, team_id, submitted_by_id, name, created_at in lock.values_list(
                "pk", "status", "updated_at", "team_id", "submitted_by_id", "name", "created_at"
            )
        }
        heads = AuditHead.objects.filter(stream__in=list(rows)).order_by("stream")
        if postgres:
            heads = heads.select_for_update(skip_locked=True)
        now_heads = {head.stream: (head.seq, head.hash) for head in heads}
        gone = []
        for stream, (_pk, status, updated_at, *_) in rows.items():
            if (
                seen.get(stream) == (status, _json_value(updated_at))
                and status in TERMINAL_WORKFLOW
                and stream in head_of
                and now_heads.get(stream) == head_of[stream]
            ):
                gone.append(stream)
        kept = [str(pk) for pk in chunk if str(pk) not in gone]
        if not gone:
            return 0, kept
        ArchivedWorkflow.objects.bulk_create(
            [
                ArchivedWorkflow(
                    workflow_id=rows[stream][0],
                    archive=archive,
                    team_id=rows[stream][3],
                    submitted_by_id=rows[stream][4],
                    name=rows[stream][5],
                    status=rows[stream][1],
                    created_at=rows[stream][6],
                    archived_at=archive.created_at,
                    seq=head_of[stream][0],
                    head=head_of[stream][1],
                )
                for stream in gone
            ]
        )
        purge(archive, [rows[stream][0] for stream in gone])
    return len(gone), kept


def purge(archive: Archive, workflow_ids: list) -> None:
    """The one delete of audit rows there is (docs/explanation/operations-at-scale.md#operations-at-scale): the rows of
    workflows just recorded as archived, inside the caller's transaction.
    On PostgreSQL the trigger checks each event against the ArchivedWorkflow
    rows of the archive this transaction names."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("archived rows are deleted inside the transaction that records them as archived")
    streams = [str(pk) for pk in workflow_ids]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, %s, true)", [SETTING, str(archive.pk)])
    for table in reversed(TABLES):
        table.rows(workflow_ids, streams)._raw_delete(connection.alias)
        if table.model is AuditEvent:
            AuditHead.objects.filter(stream__in=streams)._raw_delete(connection.alias)
