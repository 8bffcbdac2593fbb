"""Signed checkpoints of the audit trail (docs/explanation/trust-core.md#keyed-audit).

A checkpoint is a statement of every stream's (stream, seq, head hash) and
the total number of events, signed with the Ed25519 key set of
workflows.audit.signing, whose private half never enters the database. Someone
who can write rows can then neither delete, truncate nor rewrite a stream
the checkpoint saw, nor rewrite one with plain SHA-256 links, without
`verify_audit` noticing.

What the database keeps. Every stream's head every 10 minutes would be
100,000 heads (about 11 MB) per checkpoint at the bench's scale, 1.6 GB a
day. So a stored checkpoint (AuditCheckpoint) holds only the heads that
changed since the previous one, and names the previous one by the SHA-256
of its statement (`prev`): the signed chain of checkpoints folds into the
full state, and one removed, replaced or forged is a broken link or a bad
signature. Its size follows the audit writes of the period (a quiet
period costs a few hundred bytes), and it is stored zlib-compressed.
AuditCheckpointHead remembers the heads the last checkpoint signed, so
that finding what changed is one anti-join, not a fold; it is a cache that
verification never trusts.

What leaves the database. `audit_checkpoint --out FILE` writes, beside the
stored checkpoint, a file with the full state (every head) signed as one
statement: kept elsewhere, it still holds if the stored checkpoints are
rolled back.

No global counter or hash head is kept: the total is the sum of the heads'
sequence numbers, read with them, and audit appends never wait for a
checkpoint (it reads the heads; it locks none of them).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Sum
from django.utils import timezone

from workflows.audit import signing
from workflows.db import canonical_json
from workflows.models import AuditCheckpoint, AuditCheckpointHead, AuditHead

VERSION = 1
DELTA = "audit-checkpoint-delta"
FULL = "audit-checkpoint"
BAD_CHECKPOINT = "bad checkpoint"
# The PostgreSQL advisory lock that lets one process at a time write a checkpoint.
_LOCK = 0x61756474


@dataclass
class Written:
    checkpoint: AuditCheckpoint
    full: dict | None  # the signed full state, when asked for


def write_now(*, full: bool = False) -> Written:
    """Write a checkpoint now (after one being written elsewhere, if any)."""
    return _write(due_only=False, full=full)


def write_if_due() -> float:
    """Write a checkpoint when the latest is AUDIT_CHECKPOINT_MINUTES old (or
    there is none) and no other process is writing one; return the seconds
    until the next one is due. Any number of workers may call it: one
    checkpoint per period is written, by whichever gets there first."""
    period = settings.AUDIT_CHECKPOINT_MINUTES * 60
    written = _write(due_only=True)
    if written is None:
        latest = AuditCheckpoint.objects.order_by("-number").values_list("at", flat=True).first()
        if latest is None:  # another process is writing the first one
            return 5.0
        return max(1.0, period - (timezone.now() - latest).total_seconds())
    return period


def _write(*, due_only: bool, full: bool = False) -> Written | None:
    with transaction.atomic():
        if not _lock(wait=not due_only):
            return None
        latest = AuditCheckpoint.objects.order_by("-number").only("number", "at", "digest").first()
        now = timezone.now()
        if due_only and latest and (now - latest.at).total_seconds() < settings.AUDIT_CHECKPOINT_MINUTES * 60:
            return None
        signed = AuditCheckpointHead.objects.filter(
            stream=OuterRef("stream"), seq=OuterRef("seq"), hash=OuterRef("hash")
        )
        changed = [
            list(row)
            for row in AuditHead.objects.exclude(Exists(signed))
            .filter(seq__gt=0)
            .order_by("stream")
            .values_list("stream", "seq", "hash")
        ]
        AuditCheckpointHead.objects.bulk_create(
            [AuditCheckpointHead(stream=stream, seq=seq, hash=head) for stream, seq, head in changed],
            update_conflicts=True,
            unique_fields=["stream"],
            update_fields=["seq", "hash"],
            batch_size=2000,
        )
        totals = AuditCheckpointHead.objects.aggregate(streams=Count("stream"), total=Sum("seq"))
        key = signing.current()
        statement = {
            "v": VERSION,
            "type": DELTA,
            "number": latest.number + 1 if latest else 1,
            "at": now.isoformat(),
            "kid": key.kid,
            "prev": latest.digest if latest else None,
            "total": totals["total"] or 0,
            "stream_count": totals["streams"],
            "heads": changed,
        }
        data = canonical_json(statement).encode()
        checkpoint = AuditCheckpoint.objects.create(
            number=statement["number"],
            at=now,
            kid=key.kid,
            prev=statement["prev"] or "",
            digest=hashlib.sha256(data).hexdigest(),
            statement=zlib.compress(data),
            signature=key.sign(data),
            total=statement["total"],
            streams=statement["stream_count"],
            changed=len(changed),
        )
        return Written(checkpoint, _full(checkpoint, key) if full else None)


def _lock(*, wait: bool) -> bool:
    """On SQLite the transaction already holds the one write lock (BEGIN
    IMMEDIATE); on PostgreSQL an advisory lock, released at commit."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOCK])
        return cursor.fetchone()[0]


def _full(checkpoint: AuditCheckpoint, key: signing.SigningKey) -> dict:
    heads = [list(row) for row in AuditCheckpointHead.objects.order_by("stream").values_list("stream", "seq", "hash")]
    statement = {
        "v": VERSION,
        "type": FULL,
        "alg": "EdDSA",
        "number": checkpoint.number,
        "at": checkpoint.at.isoformat(),
        "kid": key.kid,
        "delta": checkpoint.digest,
        "total": checkpoint.total,
        "stream_count": checkpoint.streams,
        "heads": heads,
    }
    return {"statement": statement, "signature": key.sign(canonical_json(statement).encode())}


def save(document: dict, path: Path) -> None:
    """Write the file whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(document, out, separators=(",", ":"))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


# --- what verification holds the streams to ----------------------------------


@dataclass
class Pins:
    """Each stream's (seq, head hash) pairs that signed checkpoints saw."""

    heads: dict[str, dict[int, str]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    label: str = ""  # which checkpoint; "" when there is none

    def last_seq(self, stream: str) -> int:
        return max(self.heads.get(stream, {0: ""}))

    def pin(self, stream: str, seq: int, head: str) -> None:
        self.heads.setdefault(stream, {})[seq] = head


def stored_pins() -> Pins:
    """Fold every stored checkpoint, in order, checking each signature and
    link: every head any of them signed is kept."""
    pins, keys = Pins(), signing.keyset()
    prev, last = None, None
    for checkpoint in AuditCheckpoint.objects.order_by("number").iterator(chunk_size=20):
        name = f"checkpoint {checkpoint.number}"
        try:
            data = zlib.decompress(bytes(checkpoint.statement))
            statement = json.loads(data)
            heads = [(str(stream), int(seq), str(head)) for stream, seq, head in statement["heads"]]
        except (zlib.error, ValueError, KeyError, TypeError) as exc:
            pins.problems.append((BAD_CHECKPOINT, f"{name} cannot be read ({exc.__class__.__name__})"))
            prev = None
            continue
        key = keys.by_id(checkpoint.kid)
        if key is None or statement.get("kid") != checkpoint.kid:
            pins.problems.append(
                (
                    BAD_CHECKPOINT,
                    f"{name} is signed with key {checkpoint.kid!r}, which the signing key set does not hold",
                )
            )
        elif not key.verifies(data, checkpoint.signature):
            pins.problems.append((BAD_CHECKPOINT, f"{name}: the signature does not verify"))
        elif statement.get("number") != checkpoint.number or statement.get("prev") != prev:
            pins.problems.append(
                (
                    BAD_CHECKPOINT,
                    f"{name} does not follow the checkpoint before it (a checkpoint was removed or replaced)",
                )
            )
        else:
            for stream, seq, head in heads:
                pins.pin(stream, seq, head)
            last = statement
        prev = hashlib.sha256(data).hexdigest()
    if last is not None:
        pins.label = f"checkpoint {last['number']} of {last['at']}"
        _check_totals(pins, last, {stream: max(seqs) for stream, seqs in pins.heads.items()})
    return pins


def file_pins(path: Path, jwks: Path | None = None) -> Pins:
    """The full state of a checkpoint file, once its signature verifies with
    the public key (from the JWKS file given, or the signing key set)."""
    pins = Pins()
    try:
        document = json.loads(Path(path).read_text())
        statement, signature = document["statement"], document["signature"]
        kid = statement["kid"]
        heads = [(str(stream), int(seq), str(head)) for stream, seq, head in statement["heads"]]
        if statement.get("type") != FULL or statement.get("alg") != "EdDSA":
            raise ValueError("not an audit checkpoint")
        label = f"checkpoint file {path} ({int(statement['number'])} of {statement['at']})"
        claimed = {
            "number": statement["number"],
            "total": int(statement["total"]),
            "stream_count": int(statement["stream_count"]),
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        pins.problems.append((BAD_CHECKPOINT, f"{path} is not a readable checkpoint file ({exc})"))
        return pins
    try:
        verifier = _public_key(kid, jwks)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        pins.problems.append((BAD_CHECKPOINT, f"{jwks} is not a usable JWKS ({exc})"))
        return pins
    if verifier is None:
        pins.problems.append((BAD_CHECKPOINT, f"{path} is signed with key {kid!r}, which is not known here"))
    elif not verifier.verifies(canonical_json(statement).encode(), signature):
        pins.problems.append((BAD_CHECKPOINT, f"{path}: the signature does not verify"))
    else:
        for stream, seq, head in heads:
            pins.pin(stream, seq, head)
        pins.label = label
        _check_totals(pins, claimed, {stream: seq for stream, seq, _ in heads})
    return pins


def _public_key(kid: str, jwks: Path | None) -> signing.SigningKey | None:
    if jwks is None:
        return signing.keyset().by_id(kid)
    for jwk in json.loads(Path(jwks).read_text()).get("keys", []):
        if jwk.get("kid") == kid:
            return signing.SigningKey(kid, signing.public_from_jwk(jwk), timezone.now(), None)
    return None


def _check_totals(pins: Pins, statement: dict, last_seqs: dict[str, int]) -> None:
    if statement["total"] != sum(last_seqs.values()) or statement["stream_count"] != len(last_seqs):
        pins.problems.append(
            (
                BAD_CHECKPOINT,
                f"checkpoint {statement['number']}: its total and stream count do not match the heads it lists",
            )
        )
