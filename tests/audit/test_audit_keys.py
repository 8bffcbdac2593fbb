"""Keyed audit and signed checkpoints (docs/explanation/trust-core.md#keyed-audit): someone who can write
audit rows but holds neither the audit key nor the signing key cannot
change, remove, forge or rewrite history without `verify_audit` (the real
command, in its own process) failing and naming what it found."""

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import AddField
from django.utils import timezone

from tests.support.processes import PROJECT_DIR
from tests.support.seeing import Client
from workflows.audit import journal, keys, signing
from workflows.db import sha256_hex
from workflows.models import AuditCheckpoint, AuditEvent, AuditHead
from workflows.ops.processes import database_url

EVENTS = AuditEvent._meta.db_table
CHECKPOINTS = AuditCheckpoint._meta.db_table
HEADS = AuditHead._meta.db_table
SQLITE_GUARDS = {
    EVENTS: f"CREATE TRIGGER IF NOT EXISTS workflows_auditevent_no_update BEFORE UPDATE ON {EVENTS} "
    "BEGIN SELECT RAISE(ABORT, 'audit events are append-only (UPDATE refused)'); END;",
    CHECKPOINTS: f"CREATE TRIGGER IF NOT EXISTS workflows_auditcheckpoint_no_update BEFORE UPDATE ON {CHECKPOINTS} "
    "BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only (UPDATE refused)'); END;",
}
PG_GUARDS = {EVENTS: "workflows_auditevent_append_only", CHECKPOINTS: "workflows_auditcheckpoint_append_only"}


def manage(command, *args, **env):
    """A management command in its own process, on the test database."""
    full = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "1", "PYTHONUNBUFFERED": "1", **env}
    return subprocess.run(
        [sys.executable, "manage.py", command, *args],
        cwd=PROJECT_DIR,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def intact(*args, **env) -> str:
    result = manage("verify_audit", *args, **env)
    assert result.returncode == 0 and "audit chain OK" in result.stdout, result.stdout + result.stderr
    return result.stdout


def broken(*args, **env) -> str:
    result = manage("verify_audit", *args, **env)
    assert result.returncode == 1 and "audit chain BROKEN" in result.stderr, result.stdout + result.stderr
    return result.stderr


def sql(statement, params=()):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.fixture
def dba(transactional_db):
    """What an attacker with the database's rights does first: lift the
    append-only guards. They are put back for the tests that follow."""

    def guards(action):
        for table in (EVENTS, CHECKPOINTS):
            if connection.vendor == "postgresql":
                # Every guard: the row trigger on UPDATE, and (events) the statement check on DELETE.
                sql(f"ALTER TABLE {table} {action} TRIGGER USER")
            elif action == "DISABLE":
                sql(f"DROP TRIGGER {PG_GUARDS[table].replace('append_only', 'no_update')}")
            else:
                sql(SQLITE_GUARDS[table])

    guards("DISABLE")
    yield sql
    guards("ENABLE")


def append(stream: uuid.UUID, count: int, *, actor="agent") -> None:
    with transaction.atomic():
        journal.append_many([journal.Entry(actor, "test.tick", "test", n, stream, {"n": n}) for n in range(count)])


def stream_of(workflow_id) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(stream=str(workflow_id)).order_by("seq"))


def rewrite(stream, *, key=None, from_seq=1, actor="mallory"):
    """Recompute a stream's links from `from_seq` as someone without the
    audit key must: plain SHA-256 (no key) or HMAC under a key of their own;
    the first rewritten event gets a new actor, the head follows."""
    events = stream_of(stream)
    prev = events[from_seq - 2].hash if from_seq > 1 else journal.GENESIS
    for event in events[from_seq - 1 :]:
        event.actor = actor if event.seq == from_seq else event.actor
        digest = journal.event_hash(
            prev,
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
        )
        sql(
            f"UPDATE {EVENTS} SET actor = %s, prev_hash = %s, hash = %s, hash_alg = %s, key_id = %s WHERE id = %s",
            [event.actor, prev, digest, "hmac-sha256" if key else "sha256", key.kid if key else "", event.pk],
        )
        prev = digest
    sql(f"UPDATE {HEADS} SET hash = %s WHERE stream = %s", [prev, str(stream)])


@pytest.fixture
def trail(transactional_db):
    """Two workflows' streams of keyed events."""
    first, second = uuid.uuid4(), uuid.uuid4()
    append(first, 4)
    append(second, 3)
    return first, second


# --- keyed links --------------------------------------------------------------


def test_new_events_are_hmac_under_the_current_audit_key(trail):
    events = stream_of(trail[0])
    key = keys.current()
    assert {(event.hash_alg, event.key_id) for event in events} == {("hmac-sha256", key.kid)}
    first = events[0]
    fields = dict(
        stream=first.stream,
        seq=first.seq,
        at=first.at,
        actor=first.actor,
        verb=first.verb,
        object_type=first.object_type,
        object_id=first.object_id,
        workflow_id=first.workflow_id,
        data=first.data,
    )
    assert first.hash == journal.event_hash(first.prev_hash, key=key, **fields)
    assert first.hash != journal.event_hash(first.prev_hash, **fields)  # not plain SHA-256
    assert "audit chain OK: 7 events in 2 chains" in intact()


def test_rows_written_before_keyed_audit_still_verify_as_sha256(transactional_db):
    stream = uuid.uuid4()
    prev, at = journal.GENESIS, timezone.now()
    for seq in (1, 2):
        fields = dict(
            stream=str(stream),
            seq=seq,
            at=at,
            actor="agent",
            verb="old.event",
            object_type="test",
            object_id=str(seq),
            workflow_id=stream,
            data={"seq": seq},
        )
        digest = sha256_hex(
            prev
            + json.dumps(
                {**fields, "at": at.isoformat(), "workflow_id": str(stream)}, sort_keys=True, separators=(",", ":")
            )
        )
        AuditEvent.objects.create(prev_hash=prev, hash=digest, hash_alg="sha256", **fields)
        prev = digest
    AuditHead.objects.create(stream=str(stream), seq=2, hash=prev)
    append(stream, 2)  # the stream goes on with keyed links
    assert [event.hash_alg for event in stream_of(stream)] == ["sha256", "sha256", "hmac-sha256", "hmac-sha256"]
    call_command("audit_checkpoint")
    assert "4 events in 1 chains" in intact()


def test_the_migration_keeps_earlier_rows_as_sha256_and_the_guard_in_place(transactional_db):
    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    keyed = next(
        key
        for key, migration in graph.nodes.items()
        if key[0] == "workflows"
        and any(isinstance(op, AddField) and op.name == "hash_alg" for op in migration.operations)
    )
    before = next(parent.key for parent in graph.node_map[keyed].parents if parent.key[0] == "workflows")
    leaves = graph.leaf_nodes()
    executor.migrate([before])
    stream, at = str(uuid.uuid4()), timezone.now()
    fields = dict(
        stream=stream,
        seq=1,
        at=at.isoformat(),
        actor="agent",
        verb="old.event",
        object_type="test",
        object_id="1",
        workflow_id=stream,
        data={},
    )
    digest = sha256_hex(journal.GENESIS + json.dumps(fields, sort_keys=True, separators=(",", ":")))
    sql(
        f"INSERT INTO {EVENTS} (stream, seq, at, actor, verb, object_type, object_id, workflow_id, data, prev_hash, "
        "hash) VALUES (%s, 1, %s, 'agent', 'old.event', 'test', '1', %s, '{}', %s, %s)",
        [stream, at, stream.replace("-", "") if connection.vendor == "sqlite" else stream, journal.GENESIS, digest],
    )
    sql(f"INSERT INTO {HEADS} (stream, seq, hash) VALUES (%s, 1, %s)", [stream, digest])

    executor = MigrationExecutor(connection)
    executor.migrate(leaves)
    assert AuditEvent.objects.values_list("hash_alg", "key_id").get(stream=stream) == ("sha256", "")
    assert journal.verify().ok
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        sql(f"UPDATE {EVENTS} SET actor = 'mallory' WHERE stream = %s", [stream])


# --- what a database writer without the keys cannot hide -----------------------


def test_a_changed_row_is_detected(trail, dba):
    event = stream_of(trail[0])[1]
    dba(f"UPDATE {EVENTS} SET actor = 'mallory' WHERE id = %s", [event.pk])
    assert f"altered or inserted row: {trail[0]}: event {event.pk} (seq 2) was altered" in broken()


def test_a_deleted_row_is_detected(trail, dba):
    event = stream_of(trail[1])[1]
    dba(f"DELETE FROM {EVENTS} WHERE id = %s", [event.pk])
    assert f"missing row: {trail[1]}: expected seq 2, found 3" in broken()


def test_a_deleted_stream_and_its_head_are_caught_by_the_checkpoint(trail, dba):
    call_command("audit_checkpoint")
    dba(f"DELETE FROM {EVENTS} WHERE stream = %s", [str(trail[0])])
    dba(f"DELETE FROM {HEADS} WHERE stream = %s", [str(trail[0])])
    assert not AuditEvent.objects.filter(stream=str(trail[0])).exists()
    errors = broken()
    assert f"deleted stream: {trail[0]}: deleted: checkpoint 1 of" in errors and "saw it up to seq 4" in errors


def test_a_truncated_stream_is_caught_by_the_checkpoint(trail, dba):
    call_command("audit_checkpoint")
    events = stream_of(trail[0])
    dba(f"DELETE FROM {EVENTS} WHERE id = %s", [events[-1].pk])
    dba(f"UPDATE {HEADS} SET seq = 3, hash = %s WHERE stream = %s", [events[-2].hash, str(trail[0])])
    assert f"missing row: {trail[0]}: checkpoint 1 of" in broken()


def test_a_forged_stream_is_detected(trail, dba):
    call_command("audit_checkpoint")
    forged = uuid.uuid4()
    append(forged, 2)
    rewrite(forged)  # its links plain SHA-256, as a writer without the key makes them
    errors = broken()
    assert f"forged or unknown stream: {forged}: event" in errors and "never saw" in errors

    # Events in a stream that has no head at all are not skipped either.
    sql(f"DELETE FROM {HEADS} WHERE stream = %s", [str(forged)])
    assert f"forged or unknown stream: {forged}: 2 event(s) in a stream with no head" in broken()


def test_a_chain_rewritten_with_plain_sha256_after_keyed_links_is_detected(trail, dba):
    rewrite(trail[0], from_seq=3)
    errors = broken()
    assert f"unkeyed rewrite: {trail[0]}:" in errors and "(seq 3) is plain sha256 after keyed events" in errors
    assert "altered" not in errors  # every rewritten link recomputes: only the downgrade gives it away


def test_a_whole_stream_rewritten_with_plain_sha256_is_caught_by_the_checkpoint(trail, dba):
    call_command("audit_checkpoint")
    append(trail[0], 1)
    rewrite(trail[0])
    errors = broken()
    assert f"altered or inserted row: {trail[0]}:" in errors and "is not the event checkpoint 1 of" in errors
    assert f"unkeyed rewrite: {trail[0]}:" in errors and "beyond seq 4" in errors


def test_a_chain_rewritten_with_a_wrong_key_is_detected(trail, dba):
    wrong = keys.AuditKey(keys.current().kid, b"not-the-audit-key-at-all")
    rewrite(trail[0], key=wrong, from_seq=2)
    errors = broken()
    assert f"altered or inserted row: {trail[0]}:" in errors and "(seq 2) was altered" in errors


def test_an_unknown_key_id_is_reported(trail, dba):
    rewrite(trail[1], key=keys.AuditKey("stolen", b"a-key-of-their-own-making"), from_seq=2)
    errors = broken()
    assert (
        f"unknown key: {trail[1]}:" in errors and "sealed with key 'stolen', which AUDIT_KEYS does not list" in errors
    )


# --- rotation -------------------------------------------------------------------


def test_events_under_an_old_key_verify_after_a_new_key_is_put_first(transactional_db, settings):
    old, new = "old:" + "o" * 32, "new:" + "n" * 32
    stream = uuid.uuid4()
    try:
        settings.AUDIT_KEYS = old
        keys.audit_keys.cache_clear()
        append(stream, 2)
        settings.AUDIT_KEYS = f"{new},{old}"
        keys.audit_keys.cache_clear()
        append(stream, 2)
    finally:
        keys.audit_keys.cache_clear()
    assert [event.key_id for event in stream_of(stream)] == ["old", "old", "new", "new"]
    assert "4 events in 1 chains" in intact(AUDIT_KEYS=f"{new},{old}")
    errors = broken(AUDIT_KEYS=new)
    assert "unknown key:" in errors and "sealed with key 'old'" in errors and "(and 1 more of this kind)" in errors


# --- checkpoints ----------------------------------------------------------------


def test_a_stored_checkpoint_holds_only_the_streams_that_changed(trail):
    call_command("audit_checkpoint")
    append(trail[1], 2)
    call_command("audit_checkpoint")
    first, second = AuditCheckpoint.objects.order_by("number")
    assert (first.streams, first.changed, first.total) == (2, 2, 7)
    assert (second.streams, second.changed, second.total) == (2, 1, 9)
    assert second.prev == first.digest
    assert "held to checkpoint 2 of" in intact()


def test_a_removed_or_altered_stored_checkpoint_is_detected(trail, dba):
    for extra in range(3):
        call_command("audit_checkpoint")
        append(trail[0], 1)
    second = AuditCheckpoint.objects.get(number=2)
    dba(f"DELETE FROM {CHECKPOINTS} WHERE id = %s", [second.pk])
    assert "bad checkpoint: checkpoint 3 does not follow the checkpoint before it" in broken()

    third = AuditCheckpoint.objects.get(number=3)
    dba(f"UPDATE {CHECKPOINTS} SET signature = %s WHERE id = %s", [second.signature, third.pk])
    assert "bad checkpoint: checkpoint 3: the signature does not verify" in broken()


def test_a_checkpoint_file_verifies_with_the_public_key_and_a_tampered_one_fails(trail, dba, tmp_path):
    out, jwks = tmp_path / "checkpoint.json", tmp_path / "jwks.json"
    call_command("audit_checkpoint", "--out", str(out))
    response = Client().get("/.well-known/jwks.json")
    jwks.write_text(response.content.decode())
    append(trail[0], 2)  # history goes on after the checkpoint
    assert f"held to checkpoint file {out}" in intact("--checkpoint", str(out), "--jwks", str(jwks))

    document = json.loads(out.read_text())
    assert document["statement"]["heads"] == sorted(
        [[str(trail[0]), 4, stream_of(trail[0])[3].hash], [str(trail[1]), 3, stream_of(trail[1])[2].hash]]
    )
    document["statement"]["heads"][0][1] = 2  # claim less than was seen
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    assert "bad checkpoint:" in broken("--checkpoint", str(tampered), "--jwks", str(jwks))
    assert "the signature does not verify" in broken("--checkpoint", str(tampered))

    # The file holds even when the stored checkpoints and the stream are gone.
    dba(f"DELETE FROM {CHECKPOINTS}")
    dba(f"DELETE FROM {EVENTS} WHERE stream = %s", [str(trail[1])])
    dba(f"DELETE FROM {HEADS} WHERE stream = %s", [str(trail[1])])
    intact()  # nothing stored is left to catch it...
    errors = broken("--checkpoint", str(out), "--jwks", str(jwks))  # ...the file does
    assert f"deleted stream: {trail[1]}: deleted: checkpoint file {out}" in errors


def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_workers_write_one_checkpoint_per_period(start_worker, trail):
    workers = [start_worker(name=f"w{n}") for n in range(2)]
    wait_for(AuditCheckpoint.objects.exists)
    # Each loop looks for a due checkpoint after its heartbeat: two more
    # heartbeats of each mean both have looked since the first was written.
    for worker in workers:
        for _ in range(2):
            seen = worker.heartbeat_file.read_text()
            wait_for(lambda: worker.heartbeat_file.read_text() != seen)
    assert AuditCheckpoint.objects.count() == 1
    assert AuditCheckpoint.objects.get().total == 7
    assert "held to checkpoint 1 of" in intact()


# --- the signing key set --------------------------------------------------------


@pytest.fixture
def keyfile(settings, tmp_path):
    settings.SIGNING_KEYS_FILE = str(tmp_path / "signing-keys.json")
    return Path(settings.SIGNING_KEYS_FILE)


def published(at=None) -> list[dict]:
    with mock.patch("django.utils.timezone.now", return_value=at or timezone.now()):
        response = Client().get("/.well-known/jwks.json")
    assert response.status_code == 200
    return response.json()["keys"]


def test_signing_keys_rotate_and_the_jwks_lists_them(trail, keyfile, capsys):
    call_command("signing_key", "--new")
    first = signing.current().kid
    call_command("audit_checkpoint")
    assert [(key["kid"], key["kty"], key["crv"], key["alg"], key["use"]) for key in published()] == [
        (first, "OKP", "Ed25519", "EdDSA", "sig")
    ]

    call_command("signing_key", "--new")
    second = signing.current().kid
    assert second != first and [key["kid"] for key in published()] == [second, first]
    with pytest.raises(CommandError, match="is the current key"):
        call_command("signing_key", "--retire", second)

    call_command("signing_key", "--retire", first)
    assert "d" not in next(entry for entry in json.loads(keyfile.read_text())["keys"] if entry["kid"] == first)
    append(trail[0], 1)
    call_command("audit_checkpoint")
    assert AuditCheckpoint.objects.latest("number").kid == second
    assert [key["kid"] for key in published()] == [second, first]  # within the overlap
    assert [key["kid"] for key in published(timezone.now() + timedelta(hours=25))] == [second]
    # A checkpoint signed by the retired key still verifies here.
    assert "held to checkpoint 2 of" in intact(SIGNING_KEYS_FILE=str(keyfile))
    call_command("signing_key")
    listing = capsys.readouterr().out
    assert f"{second}  current, published" in listing and f"{first}  retired, published" in listing


def test_the_jwks_needs_no_login_and_holds_no_private_key(db):
    response = Client().get("/.well-known/jwks.json")
    assert response.status_code == 200 and response["Cache-Control"] == "public, max-age=300"
    for key in response.json()["keys"]:
        assert set(key) == {"kty", "crv", "x", "kid", "alg", "use"}
        assert key["x"] == signing.b64(signing.unb64(key["x"])) and len(signing.unb64(key["x"])) == 32


def test_processes_starting_at_once_share_one_generated_key_set(tmp_path):
    env = {**os.environ, "DEBUG": "1", "VAR_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"}
    env.pop("SIGNING_KEYS_FILE", None)
    starts = [
        subprocess.Popen(
            [sys.executable, "manage.py", "signing_key"],
            cwd=PROJECT_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    listings = [process.communicate(timeout=120) for process in starts]
    assert all(process.returncode == 0 for process in starts), listings
    keyset = json.loads((tmp_path / "signing-keys.json").read_text())
    assert len(keyset["keys"]) == 1
    assert {out.split()[0] for out, _ in listings} == {keyset["current"]}
    assert (tmp_path / "signing-keys.json").stat().st_mode & 0o077 == 0
