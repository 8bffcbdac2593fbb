"""Reading an archive back (docs/explanation/operations-at-scale.md#operations-at-scale): `verify` proves an archive
complete, unmodified and joined to the live audit chain; `restore` brings one
workflow back from a verified archive, read-only. The format and the
writing are `workflows.audit.archive`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.db import IntegrityError, transaction
from django.utils import timezone

from workflows.audit import checkpoints, journal, keys
from workflows.audit.archive import (
    ARCHIVED,
    CHECKPOINT,
    FILES,
    MANIFEST,
    TABLES,
    TYPE,
    VERSION,
    ArchiveError,
    file_sha256,
    read_rows,
)
from workflows.db import canonical_json
from workflows.models import ArchivedWorkflow, AuditEvent, AuditHead, Step, Workflow

RESTORED = "audit.restored"


# --- verifying -------------------------------------------------------------------


@dataclass
class Verified:
    directory: Path
    problems: list[str] = field(default_factory=list)
    statement: dict = field(default_factory=dict)
    digest: str = ""
    events: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def read_manifest(directory: Path, jwks: Path | None = None) -> tuple[dict, str, list[str]]:
    """(statement, digest, problems) of the archive's manifest."""
    path = Path(directory) / MANIFEST
    try:
        document = json.loads(path.read_text())
        statement, signature = document["statement"], document["signature"]
        if statement.get("type") != TYPE or statement.get("alg") != "EdDSA" or statement.get("v") != VERSION:
            raise ValueError("not a Durable Console archive manifest")
        kid = statement["kid"]
        for name in ("files", "heads", "counts"):
            if not isinstance(statement[name], dict | list):
                raise ValueError(f"{name} is not a list or mapping")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {}, "", [f"manifest: {path} cannot be read ({exc})"]
    data = canonical_json(statement).encode()
    digest = hashlib.sha256(data).hexdigest()
    try:
        verifier = checkpoints._public_key(kid, jwks)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return statement, digest, [f"manifest: {jwks} is not a usable JWKS ({exc})"]
    if verifier is None:
        return statement, digest, [f"manifest: signed with key {kid!r}, which is not known here"]
    if not verifier.verifies(data, signature):
        return statement, digest, ["manifest: the signature does not verify (the manifest was modified)"]
    return statement, digest, []


def verify(directory: Path, *, jwks: Path | None = None, live: bool = True) -> Verified:
    """Prove the archive complete and unmodified, and (`live`) joined to the
    live audit chain. Every problem found is named."""
    directory = Path(directory)
    result = Verified(directory)
    statement, result.digest, problems = read_manifest(directory, jwks)
    result.statement = statement
    result.problems += problems
    if problems:
        return result
    found = result.problems
    files: dict = statement["files"]
    expected_files = set(FILES)
    if set(files) != expected_files:
        found.append(f"manifest: lists files {sorted(files)}, an archive has {sorted(expected_files)}")
        return result
    for extra in sorted(
        p.name
        for p in directory.iterdir()
        if p.name not in expected_files | {MANIFEST, CHECKPOINT} and not p.name.startswith(".")
    ):
        found.append(f"{extra}: not part of the archive (the manifest does not list it)")
    usable = set()
    for name, meta in files.items():
        path = directory / name
        if not path.exists():
            found.append(f"{name}: missing")
        elif (actual := file_sha256(path)) != meta.get("sha256"):
            found.append(f"{name}: modified: its SHA-256 is {actual}, the signed manifest says {meta.get('sha256')}")
        else:
            usable.add(name)
    heads = {stream: (seq, head) for stream, seq, head in statement["heads"]}
    workflow_ids: set[str] = set()
    for table in TABLES:  # workflows first: the others are checked against them
        if table.file not in usable:
            continue
        rows = 0
        try:
            if table.model is AuditEvent:
                rows = _check_chains(directory / table.file, heads, workflow_ids, result)
            else:
                for row in read_rows(directory / table.file):
                    rows += 1
                    if table.model is Workflow:
                        workflow_ids.add(row["id"])
                    elif (
                        table.workflow_column
                        and "workflows.jsonl.gz" in usable
                        and row.get(table.workflow_column) not in workflow_ids
                    ):
                        found.append(f"{table.file}: row {row.get('id')} belongs to no archived workflow")
        except (OSError, EOFError, ValueError, KeyError, TypeError, gzip.BadGzipFile) as exc:
            found.append(f"{table.file}: cannot be read ({exc.__class__.__name__}: {exc})")
            continue
        if rows != files[table.file].get("rows") or rows != statement["counts"].get(table.file):
            found.append(f"{table.file}: holds {rows} rows, the manifest says {files[table.file].get('rows')}")
    if "workflows.jsonl.gz" in usable:
        if len(workflow_ids) != statement.get("workflows"):
            found.append(
                f"workflows.jsonl.gz: {len(workflow_ids)} workflows, the manifest says {statement.get('workflows')}"
            )
        if set(heads) != workflow_ids:
            found.append(f"manifest: its audit heads name {len(heads)} streams for {len(workflow_ids)} workflows")
    _check_checkpoint_file(directory, heads, jwks, result)
    if live:
        _check_joined(statement, result.digest, heads, result)
    return result


def _check_chains(path: Path, heads: dict, workflow_ids: set[str], result: Verified) -> int:
    """Recompute every archived stream's links with the audit keys, from its
    first event to the head the manifest names."""
    last: dict[str, tuple[int, str]] = {}
    found, rows = result.problems, 0
    for row in read_rows(path):
        rows += 1
        stream = row["stream"]
        seq, prev = last.get(stream, (0, journal.GENESIS))
        where = f"audit_events.jsonl.gz: {stream} seq {row['seq']}"
        if workflow_ids and stream not in workflow_ids:
            found.append(f"{where}: a stream of no archived workflow")
        if row["seq"] != seq + 1:
            found.append(f"{where}: expected seq {seq + 1} (an event is missing or out of order)")
        elif row["prev_hash"] != prev:
            found.append(f"{where}: does not link to the previous event")
        key = None
        if row["hash_alg"] == AuditEvent.HMAC_SHA256:
            key = keys.by_id(row["key_id"])
            if key is None:
                found.append(f"{where}: sealed with audit key {row['key_id']!r}, which AUDIT_KEYS does not list")
        if key is not None or row["hash_alg"] == AuditEvent.SHA256:
            recomputed = journal.event_hash(
                row["prev_hash"],
                key=key,
                stream=stream,
                seq=row["seq"],
                at=datetime.fromisoformat(row["at"]),
                actor=row["actor"],
                verb=row["verb"],
                object_type=row["object_type"],
                object_id=row["object_id"],
                workflow_id=row["workflow_id"],
                data=row["data"],
                identity={name: row.get(name, "") for name in journal.IDENTITY_FIELDS},
            )
            if recomputed != row["hash"]:
                found.append(f"{where}: altered (hash mismatch)")
        last[stream] = (row["seq"], row["hash"])
        result.events += 1
    for stream, (seq, head) in heads.items():
        if last.get(stream) != (seq, head):
            got = last.get(stream, (0, journal.GENESIS))
            found.append(f"audit_events.jsonl.gz: {stream} ends at seq {got[0]}, the manifest's head is seq {seq}")
    for stream in sorted(set(last) - set(heads)):
        found.append(f"audit_events.jsonl.gz: {stream} is not among the manifest's heads")
    return rows


def _check_checkpoint_file(directory: Path, heads: dict, jwks: Path | None, result: Verified) -> None:
    """The checkpoint signed right after the archive was recorded saw every
    archived stream at least up to its archived head."""
    path = directory / CHECKPOINT
    if not path.exists():
        result.problems.append(f"{CHECKPOINT}: missing")
        return
    pins = checkpoints.file_pins(path, jwks)
    if pins.problems:
        result.problems += [f"{CHECKPOINT}: {problem}" for _, problem in pins.problems]
        return
    for stream, (seq, head) in heads.items():
        pinned = pins.heads.get(stream, {})
        last = max(pinned, default=0)
        if last < seq or (last == seq and pinned[seq] != head):
            result.problems.append(f"{CHECKPOINT}: does not see {stream} at its archived head (seq {seq})")


def _check_joined(statement: dict, digest: str, heads: dict, result: Verified) -> None:
    """The live chain's `audit.archived` events carry this manifest's digest
    and its heads, and the system stream that holds them verifies."""
    events = list(
        AuditEvent.objects.filter(
            stream=journal.SYSTEM_STREAM, verb=ARCHIVED, object_id=str(statement.get("archive"))
        ).order_by("seq")
    )
    if not events:
        result.problems.append(
            f"live chain: no {ARCHIVED} event names archive {statement.get('archive')}: the "
            "archive does not join the live audit chain"
        )
        return
    recorded: dict = {}
    for event in events:
        if event.data.get("manifest_sha256") != digest:
            result.problems.append(
                f"live chain: {ARCHIVED} event {event.pk} carries manifest digest "
                f"{event.data.get('manifest_sha256')}, this manifest's is {digest}"
            )
            return
        recorded.update({stream: (seq, head) for stream, seq, head in event.data.get("heads", [])})
    if len(events) != events[0].data.get("parts") or recorded != heads:
        result.problems.append(f"live chain: the {ARCHIVED} events do not record this manifest's heads")
    chain = journal.verify([journal.SYSTEM_STREAM])
    if not chain.ok:
        result.problems += [f"live chain: {problem}" for problem in chain.problems[:5]]


# --- restoring --------------------------------------------------------------------


def _instance(model, row: dict):
    values = {}
    for f in model._meta.concrete_fields:
        if f.attname in row:
            value = row[f.attname]
            values[f.attname] = value if value is None or f.get_internal_type() == "JSONField" else f.to_python(value)
    return model(**values)


def restore(directory: Path, workflow_id, *, by: str = "restore", jwks: Path | None = None) -> Workflow:
    """Bring one workflow back from a verified archive into the tables,
    read-only (`Workflow.restored_at`): its page, audit trail and chain are
    as they were; no operation or worker can change it."""
    directory = Path(directory)
    try:
        workflow_id = uuid.UUID(str(workflow_id))
    except ValueError:
        raise ArchiveError(f"{workflow_id!r} is not a workflow id") from None
    checked = verify(directory, jwks=jwks)
    if not checked.ok:
        raise ArchiveError("the archive does not verify; nothing restored:\n  " + "\n  ".join(checked.problems[:10]))
    stream = str(workflow_id)
    if stream not in {s for s, _, _ in checked.statement["heads"]}:
        raise ArchiveError(f"workflow {workflow_id} is not in this archive")
    if Workflow.objects.filter(pk=workflow_id).exists():
        raise ArchiveError(f"workflow {workflow_id} is in the database already")
    found: dict[type, list] = defaultdict(list)
    step_ids: set = set()
    for table in TABLES:
        for row in read_rows(directory / table.file):
            if table.model is Workflow:
                keep = row["id"] == stream
            elif table.model is AuditEvent:
                keep = row["stream"] == stream
            elif table.workflow_column:
                keep = row.get(table.workflow_column) == stream
            else:
                keep = row["step_id"] in step_ids
            if keep:
                if table.model is Step:
                    step_ids.add(row["id"])
                found[table.model].append(_instance(table.model, row))
    now = timezone.now()
    seq, head = next((seq, head) for s, seq, head in checked.statement["heads"] if s == stream)
    try:
        with transaction.atomic():
            for workflow in found[Workflow]:
                workflow.restored_at = now
            for table in TABLES:
                if found[table.model]:
                    table.model.objects.bulk_create(found[table.model], batch_size=500)
            AuditHead.objects.create(stream=stream, seq=seq, hash=head)
            ArchivedWorkflow.objects.filter(workflow_id=workflow_id).update(restored_at=now)
            journal.append(
                actor=by,
                verb=RESTORED,
                obj_type="workflow",
                obj_id=workflow_id,
                data={"archive": checked.statement["archive"], "manifest_sha256": checked.digest, "workflow": stream},
            )
    except IntegrityError as exc:
        raise ArchiveError(f"workflow {workflow_id} cannot be restored: {exc}") from None
    return found[Workflow][0]


def archived_record(user, workflow_id) -> ArchivedWorkflow | None:
    """What the console says of an id no longer in the tables: its
    archive record, when `user` would have seen the workflow."""
    return ArchivedWorkflow.objects.visible_to(user).filter(workflow_id=workflow_id).first()


def describe(record: ArchivedWorkflow) -> str:
    return f"Workflow {record.workflow_id} was archived on {record.archived_at:%Y-%m-%d}."
