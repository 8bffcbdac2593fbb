"""Retention with a verifiable archive (docs/explanation/operations-at-scale.md#operations-at-scale): `archive` moves
old finished workflows out to signed, hashed files after recording the archive
in the live audit chain; the chain still verifies; `verify_archive` finds
any change to the files or the manifest; `restore` brings one back
read-only; the console says "archived on DATE"; teams keep their own
retention; nothing unfinished is ever archived, even while workers run."""

import gzip
import io
import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.processes import PROJECT_DIR
from tests.support.running import run_until, wait_for_status
from tests.support.seeing import Client
from workflows import actions
from workflows.actions import Outcome
from workflows.audit import archive, journal
from workflows.engine import execution, outcomes, recovery
from workflows.models import (
    Archive,
    ArchivedWorkflow,
    Attempt,
    AuditEvent,
    AuditHead,
    Compensation,
    DeadLetter,
    Step,
    Team,
    Workflow,
)
from workflows.operations import cancellation, compensation, deadletters, plans
from workflows.ops.processes import database_url
from workflows.states import AttemptStatus, StepStatus, WorkflowStatus
from workflows.webhooks import endpoints
from workflows.webhooks.models import WebhookDelivery

OLD = timedelta(days=200)


def submitted(people, key):
    return plans.submit(people["agent"], ticket_plan(key)).workflow


def completed(people, key):
    workflow = decide.approve(submitted(people, key), by=people["reviewer"])
    run_until(workflow.pk, WorkflowStatus.COMPLETE)
    return workflow


def cancelled(people, key):
    return cancellation.cancel(submitted(people, key), by=people["agent"], reason="not needed")


def age(*workflows, by=OLD):
    Workflow.objects.filter(pk__in=[w.pk for w in workflows]).update(updated_at=timezone.now() - by)


def run(command, *args):
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *[str(arg) for arg in args], stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def refused(command, *args) -> str:
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(command, *[str(arg) for arg in args], stdout=io.StringIO(), stderr=err)
    return err.getvalue() + str(raised.value)


@pytest.fixture
def archived(people, desk, tmp_path):
    """Two old finished plans (one run to the end on the desk, one
    cancelled) archived; beside them an old plan still awaiting review and
    a finished one too recent to go. A signed checkpoint saw every stream
    before the archive: verification holds them to it."""
    done = completed(people, "done")
    dropped = cancelled(people, "dropped")
    waiting = submitted(people, "waiting")
    recent = cancelled(people, "recent")
    age(done, dropped, waiting)
    run("audit_checkpoint")
    directory = tmp_path / "archive"
    output = run("archive", "--older-than", "90d", "--to", directory, "--batch", 1)
    return {"done": done, "dropped": dropped, "waiting": waiting, "recent": recent, "dir": directory, "output": output}


def test_archive_moves_old_finished_workflows_out_and_the_live_chain_still_verifies(archived):
    gone = [archived["done"].pk, archived["dropped"].pk]
    streams = [str(pk) for pk in gone]
    assert "Archived 2 workflows" in archived["output"] and "deleted 2" in archived["output"]
    assert not Workflow.objects.filter(pk__in=gone).exists()
    assert not Step.objects.filter(workflow_id__in=gone).exists()
    assert not Attempt.objects.filter(step__workflow_id__in=gone).exists()
    assert not AuditEvent.objects.filter(stream__in=streams).exists()
    assert not AuditHead.objects.filter(stream__in=streams).exists()
    # Not finished, or not old enough: left alone.
    assert Workflow.objects.filter(pk__in=[archived["waiting"].pk, archived["recent"].pk]).count() == 2

    manifest = json.loads((archived["dir"] / "manifest.json").read_text())["statement"]
    assert manifest["workflows"] == 2
    assert manifest["counts"]["workflows.jsonl.gz"] == 2
    assert manifest["counts"]["steps.jsonl.gz"] == 6 and manifest["counts"]["attempts.jsonl.gz"] == 3
    assert sorted(stream for stream, _, _ in manifest["heads"]) == sorted(streams)
    with gzip.open(archived["dir"] / "steps.jsonl.gz", "rt") as lines:
        assert {json.loads(line)["workflow_id"] for line in lines} == set(streams)

    # The live chain recorded the archive (one event per batch of heads) before the delete.
    recorded = AuditEvent.objects.filter(stream=journal.SYSTEM_STREAM, verb="audit.archived")
    assert recorded.count() == 2
    digest = Archive.objects.get().manifest_digest
    assert {event.data["manifest_sha256"] for event in recorded} == {digest}
    assert ArchivedWorkflow.objects.filter(workflow_id__in=gone).count() == 2

    # Streams the checkpoint saw are gone from the tables, yet held to their archive, not reported deleted.
    verified = run("verify_audit")
    assert "audit chain OK" in verified and "2 archived streams held to their archives" in verified
    assert "archive OK: 2 workflows" in run("verify_archive", archived["dir"])


def test_a_stream_deleted_outside_an_archive_is_still_reported(archived, people):
    """The archive's events excuse only the streams they name, at their heads."""
    other = archived["recent"]
    run("audit_checkpoint")
    with transaction.atomic():
        fake = Archive.objects.create(by="mallory", location="-", manifest_digest="0" * 64, workflows=1)
        head = AuditHead.objects.get(stream=str(other.pk))
        ArchivedWorkflow.objects.create(
            workflow_id=other.pk,
            archive=fake,
            team_id=other.team_id,
            submitted_by=people["agent"],
            name="x",
            status="CANCELLED",
            created_at=other.created_at,
            seq=head.seq,
            head=head.hash,
        )
        archive.purge(fake, [other.pk])
    assert "deleted stream" in refused("verify_audit")


@pytest.mark.parametrize(
    "tamper, expected",
    [
        ("steps", "steps.jsonl.gz: modified"),
        ("events", "audit_events.jsonl.gz: modified"),
        ("manifest", "manifest: the signature does not verify"),
        ("missing", "attempts.jsonl.gz: missing"),
        ("rehashed", "manifest: the signature does not verify"),
    ],
)
def test_any_change_to_an_archive_is_detected_with_a_clear_message(archived, tamper, expected):
    directory = archived["dir"]
    if tamper in ("steps", "events"):
        path = directory / ("steps.jsonl.gz" if tamper == "steps" else "audit_events.jsonl.gz")
        with gzip.open(path, "rt") as lines:
            rows = [json.loads(line) for line in lines]
        if tamper == "steps":
            rows[0]["args"] = {"title": "something else"}
        else:
            rows[0]["actor"] = "mallory"
        with gzip.open(path, "wt") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
    elif tamper == "manifest":
        path = directory / "manifest.json"
        document = json.loads(path.read_text())
        document["statement"]["counts"]["steps.jsonl.gz"] -= 1
        path.write_text(json.dumps(document))
    elif tamper == "missing":
        (directory / "attempts.jsonl.gz").unlink()
    else:  # a file changed and its new hash written into the manifest: only the signature stops it
        path = directory / "traces.jsonl.gz"
        path.write_bytes(gzip.compress(b'{"id": "forged"}\n'))
        document = json.loads((directory / "manifest.json").read_text())
        document["statement"]["files"]["traces.jsonl.gz"]["sha256"] = archive.file_sha256(path)
        (directory / "manifest.json").write_text(json.dumps(document))
    problems = refused("verify_archive", directory)
    assert expected in problems and "archive BROKEN" in problems


def test_verify_archive_run_as_a_command_exits_non_zero_on_a_changed_file(transactional_db, archived):
    def verify_archive():
        env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "1"}
        return subprocess.run(
            [sys.executable, "manage.py", "verify_archive", str(archived["dir"])],
            cwd=PROJECT_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    intact = verify_archive()
    assert intact.returncode == 0 and "archive OK" in intact.stdout, intact.stdout + intact.stderr
    path = archived["dir"] / "approvals.jsonl.gz"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    broken = verify_archive()
    assert broken.returncode == 1 and "approvals.jsonl.gz: modified" in broken.stderr, broken.stdout + broken.stderr


def test_an_archive_the_live_chain_never_recorded_does_not_verify(archived):
    """The join: the manifest's digest must be on an audit.archived event of the live chain."""
    document = json.loads((archived["dir"] / "manifest.json").read_text())
    statement = dict(document["statement"], archive="00000000-0000-0000-0000-000000000000")
    from workflows.audit import checkpoints, signing
    from workflows.db import canonical_json

    key = signing.current()
    checkpoints.save(
        {"statement": statement, "signature": key.sign(canonical_json(statement).encode())},
        archived["dir"] / "manifest.json",
    )
    assert "does not join the live audit chain" in refused("verify_archive", archived["dir"])


def test_the_console_and_the_api_say_archived_on_date_instead_of_404(archived, api, people):
    gone = archived["done"].pk
    today = timezone.now().strftime("%Y-%m-%d")
    answer = api["agent"].get(f"/workflows/{gone}")
    assert answer.status_code == 410
    assert answer.json() == {"error": {"code": "archived", "message": f"Workflow {gone} was archived on {today}."}}
    browser = Client()
    assert browser.login(username="reviewer", password=PASSWORD)
    page = browser.get(f"/workflows/{gone}/")
    assert page.status_code == 410 and f"Workflow {gone} was archived on {today}." in page.content.decode()
    # Still 404 for an id nobody archived, and the live ones keep their shape.
    assert api["agent"].get("/workflows/00000000-0000-0000-0000-000000000000").status_code == 404
    live = api["agent"].get(f"/workflows/{archived['waiting'].pk}")
    assert live.status_code == 200 and live.json()["status"] == "PLANNED"


def test_an_archived_workflow_of_another_team_is_not_announced(archived, api):
    other = Team.objects.create(name="elsewhere")
    ArchivedWorkflow.objects.filter(workflow_id=archived["done"].pk).update(team=other)
    browser = Client()
    assert browser.login(username="reviewer", password=PASSWORD)
    assert browser.get(f"/workflows/{archived['done'].pk}/").status_code == 404


def test_restore_brings_one_workflow_back_read_only(archived, api, people):
    done = archived["done"]
    output = run("restore", archived["dir"], "--workflow", done.pk)
    assert f"Restored workflow {done.pk}" in output
    restored = Workflow.objects.get(pk=done.pk)
    assert restored.restored_at is not None and restored.status == WorkflowStatus.COMPLETE
    assert restored.steps.count() == 3 and Attempt.objects.filter(step__workflow=restored).count() == 3
    answer = api["agent"].get(f"/workflows/{done.pk}")
    assert answer.status_code == 200 and [s["status"] for s in answer.json()["steps"]] == ["COMPLETE"] * 3
    browser = Client()
    assert browser.login(username="operator", password=PASSWORD)
    assert "restored read-only" in browser.get(f"/workflows/{done.pk}/").content.decode()
    # Its stream is back and verifies with the rest.
    assert "audit chain OK" in run("verify_audit")
    assert AuditEvent.objects.filter(stream=journal.SYSTEM_STREAM, verb="audit.restored").count() == 1
    # Read-only: no operation changes it, nor does SQL.
    refusal = api["operator"].post(f"/workflows/{done.pk}/compensations", {"reason": "undo it all"})
    assert refusal.status_code == 409 and "read-only" in refusal.json()["error"]["message"]
    with pytest.raises(DatabaseError, match="read-only"), transaction.atomic():
        Workflow.objects.filter(pk=done.pk).update(name="rewritten")
    # Never archived again, and restored once only.
    assert "Nothing to archive" in run("archive", "--older-than", "150d", "--to", archived["dir"].parent / "again")
    assert "in the database already" in refused("restore", archived["dir"], "--workflow", done.pk)


def test_restore_refuses_an_archive_that_does_not_verify(archived):
    path = archived["dir"] / "workflows.jsonl.gz"
    path.write_bytes(path.read_bytes() + b"\x00")
    message = refused("restore", archived["dir"], "--workflow", archived["done"].pk)
    assert "does not verify" in message and "workflows.jsonl.gz: modified" in message
    assert not Workflow.objects.filter(pk=archived["done"].pk).exists()


def test_only_the_archive_path_deletes_audit_events(people):
    workflow = cancelled(people, "guarded")
    stream = str(workflow.pk)
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(stream=stream).delete()
    if connection.vendor == "postgresql":
        table = AuditEvent._meta.db_table
        # Raw SQL is refused, even with the archive's setting, unless the stream was recorded as archived.
        for setting in ("", f"SELECT set_config('{archive.SETTING}', gen_random_uuid()::text, true);"):
            with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"{setting} DELETE FROM {table} WHERE stream = %s", [stream])
    assert AuditEvent.objects.filter(stream=stream).exists()


def test_retention_is_set_per_team_and_used_without_older_than(people, tmp_path):
    run("team", "add", "payments")
    assert "30 days" in run("team", "retention", "payments", "30")
    assert "retention is a number" in refused("team", "retention", "payments", "-3").lower()
    kept = cancelled(people, "default-team")
    paid = cancelled(people, "payments-team")
    Workflow.objects.filter(pk=paid.pk).update(team=Team.objects.get(name="payments"))
    age(kept, paid, by=timedelta(days=45))
    output = run("archive", "--to", tmp_path / "by-team")
    assert "Archived 1 workflows" in output
    assert Workflow.objects.filter(pk=kept.pk).exists() and not Workflow.objects.filter(pk=paid.pk).exists()
    manifest = json.loads((tmp_path / "by-team" / "manifest.json").read_text())["statement"]
    assert manifest["rule"] == {"team_retention_days": {"payments": 30}}


def test_a_workflow_changed_after_it_was_written_out_is_kept(people, desk, tmp_path, monkeypatch):
    """A compensation requested while the archive runs: the workflow stays."""
    done = completed(people, "late-undo")
    age(done)
    real = archive._delete

    def request_first(archive_row, chunk, seen, head_of):
        compensation.request(Workflow.objects.get(pk=done.pk), by=people["operator"], reason="undo it")
        return real(archive_row, chunk, seen, head_of)

    monkeypatch.setattr(archive, "_delete", request_first)
    output = run("archive", "--older-than", "90d", "--to", tmp_path / "late")
    assert "1 changed while being archived and were kept" in output
    assert Workflow.objects.filter(pk=done.pk).exists()
    assert "audit chain OK" in run("verify_audit")


def test_archive_runs_beside_a_working_worker_and_never_takes_unfinished_work(people, start_worker, tmp_path):
    old = [cancelled(people, f"old-{n}") for n in range(6)]
    age(*old)
    start_worker()
    running = [decide.approve(submitted(people, f"live-{n}"), by=people["reviewer"]) for n in range(4)]
    output = run("archive", "--older-than", "90d", "--to", tmp_path / "busy", "--batch", 2)
    assert "Archived 6 workflows" in output
    for workflow in running:
        assert wait_for_status(workflow.pk, WorkflowStatus.COMPLETE, timeout=60) == WorkflowStatus.COMPLETE
    assert not Workflow.objects.filter(pk__in=[w.pk for w in old]).exists()
    archived_ids = {row.workflow_id for row in ArchivedWorkflow.objects.all()}
    assert archived_ids.isdisjoint({w.pk for w in running})
    assert "archive OK" in run("verify_archive", tmp_path / "busy")
    assert "audit chain OK" in run("verify_audit")


# --- finished, yet someone may still act on it: never archived ------------------------


def with_open_dead_letter(people):
    """A run that failed (its dead letter still open), then cancelled: an
    operator may still replay or discard the entry."""
    workflow = plans.submit(
        people["agent"],
        {
            "name": "missing ticket",
            "submission_key": "dead",
            "steps": [
                {"key": "find", "action": "noop", "args": {"ticket": 777777}},
                {
                    "key": "note",
                    "action": "ticket.comment",
                    "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "hi"},
                },
            ],
        },
    ).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, WorkflowStatus.FAILED)
    workflow = cancellation.cancel(Workflow.objects.get(pk=workflow.pk), by=people["operator"], reason="stop")
    entry = DeadLetter.objects.open().get(workflow=workflow)
    return workflow, lambda: deadletters.discard(entry, by=people["operator"], reason="nothing to do")


def with_pending_compensation(people):
    """Complete, with an undo requested and not yet decided."""
    workflow = completed(people, "undo-asked")
    comp = compensation.request(Workflow.objects.get(pk=workflow.pk), by=people["operator"], reason="undo it")
    return workflow, lambda: decide.decline(comp, by=people["reviewer2"], reason="keep it")


def with_attempt_in_flight(people):
    """Cancelled while a worker's call was out: the attempt still awaits its
    outcome, which the worker then records under its claim (as `execute` does)."""
    plan = {"name": "one call", "submission_key": "in-flight", "steps": [{"key": "s", "action": "noop", "args": {}}]}
    workflow = decide.approve(plans.submit(people["agent"], plan).workflow, by=people["reviewer"])
    step = execution.claim(workflow.pk)
    attempt = execution._request_attempt(step, step.fence)
    workflow = cancellation.cancel(Workflow.objects.get(pk=workflow.pk), by=people["operator"], reason="stop")

    def answered():
        outcomes.record_outcome(step, attempt, Outcome(result={}), step.fence, AttemptStatus.SUCCEEDED)
        outcomes.verify(step, actions.get(step.action), step.fence)

    return workflow, answered


def with_outcome_to_learn(people):
    """Cancelled while a worker's call was out, and that worker vanished:
    recovery put the step back in line, its attempt's outcome is still to be
    learned (a lookup will tell whether the effect happened)."""
    plan = {"name": "one call", "submission_key": "lost-worker", "steps": [{"key": "s", "action": "noop", "args": {}}]}
    workflow = decide.approve(plans.submit(people["agent"], plan).workflow, by=people["reviewer"])
    step = execution.claim(workflow.pk)
    attempt = execution._request_attempt(step, step.fence)
    workflow = cancellation.cancel(Workflow.objects.get(pk=workflow.pk), by=people["operator"], reason="stop")
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    assert Step.objects.get(pk=step.pk).status == StepStatus.WAITING_RETRY  # no step left running: only the attempt
    # Settled as a reconciliation settles it once the lookup answered.
    return workflow, lambda: Attempt.objects.filter(pk=attempt.pk).update(
        status=AttemptStatus.RECONCILED, finished_at=timezone.now()
    )


def with_pending_delivery(people):
    """Cancelled, its webhook event not delivered yet (the endpoint was down)."""
    workflow = cancelled(people, "undelivered")
    endpoint, _ = endpoints.create(by=people["operator"], url="https://hooks.example.com/in")
    delivery = WebhookDelivery.objects.create(
        event="workflow.cancelled",
        workflow=workflow,
        endpoint=endpoint,
        body="{}",
        attempts=2,
        next_attempt_at=timezone.now(),
    )
    return workflow, lambda: WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=WebhookDelivery.Status.DELIVERED, delivered_at=timezone.now()
    )


@pytest.mark.parametrize(
    "make",
    [
        with_open_dead_letter,
        with_pending_compensation,
        with_attempt_in_flight,
        with_outcome_to_learn,
        with_pending_delivery,
    ],
    ids=lambda make: make.__name__,
)
def test_an_old_finished_workflow_someone_may_still_act_on_is_never_archived(make, people, desk, tmp_path):
    workflow, settle = make(people)
    assert Workflow.objects.get(pk=workflow.pk).status in {WorkflowStatus.COMPLETE, WorkflowStatus.CANCELLED}
    age(workflow)

    assert "Nothing to archive" in run("archive", "--older-than", "90d", "--to", tmp_path / "first")
    assert Workflow.objects.filter(pk=workflow.pk).exists() and not ArchivedWorkflow.objects.exists()

    # What held it back was that open matter: settled, the same workflow goes.
    settle()
    age(workflow)
    assert "Archived 1 workflows" in run("archive", "--older-than", "90d", "--to", tmp_path / "second")
    assert not Workflow.objects.filter(pk=workflow.pk).exists()
    assert not Compensation.objects.filter(workflow_id=workflow.pk).exists()
