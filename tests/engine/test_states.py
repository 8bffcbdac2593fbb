"""One transition table; illegal moves raise; every move is audited and chained."""

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from tests.support.plans import ticket_plan
from workflows import states
from workflows.audit import journal
from workflows.engine.transitions import move
from workflows.models import AuditEvent, Step, Workflow
from workflows.operations import plans
from workflows.states import IllegalTransition, StepStatus, WorkflowStatus


@pytest.fixture
def workflow(people):
    return plans.submit(people["agent"], ticket_plan()).workflow


def test_status_strings_are_the_contract():
    assert set(WorkflowStatus.values) == {
        "PLANNED",
        "APPROVED",
        "RUNNING",
        "COMPLETE",
        "REJECTED",
        "EXPIRED",
        "CANCELLED",
        "FAILED",
        "NEEDS_ATTENTION",
        "COMPENSATING",
        "COMPENSATED",
        "COMPENSATION_FAILED",
        "WAITING_GATE",
    }
    assert set(StepStatus.values) == {
        "PENDING",
        "RUNNING",
        "VERIFYING",
        "COMPLETE",
        "WAITING_RETRY",
        "IN_DOUBT",
        "DEAD_LETTERED",
        "BLOCKED",
        "COMPENSATING",
        "COMPENSATED",
        "WAITING_GATE",
        "SKIPPED",
    }
    assert set(states.AttemptStatus.values) == {"REQUESTED", "SUCCEEDED", "FAILED", "UNKNOWN", "RECONCILED"}
    assert set(states.FailureClass.values) == {
        "TRANSIENT",
        "RATE_LIMITED",
        "DEPENDENCY_UNAVAILABLE",
        "TIMEOUT",
        "INVALID_ARGUMENTS",
        "PERMISSION_DENIED",
        "POLICY_FAILED",
        "CONFLICT",
        "UNKNOWN",
    }


@pytest.mark.parametrize("target", ["COMPLETE", "RUNNING", "FAILED", "COMPENSATED"])
def test_illegal_workflow_transition_raises_and_changes_nothing(workflow, target):
    events = AuditEvent.objects.count()
    with pytest.raises(IllegalTransition):
        move(workflow, target, actor="test")
    workflow.refresh_from_db()
    assert workflow.status == "PLANNED"
    assert AuditEvent.objects.count() == events


def test_illegal_step_transition_raises(workflow):
    step = workflow.steps.first()
    with pytest.raises(IllegalTransition):
        move(step, StepStatus.COMPLETE, actor="test")  # PENDING cannot skip to COMPLETE
    assert Step.objects.get(pk=step.pk).status == "PENDING"


def test_every_table_target_is_a_known_status():
    for kind, table in states.TRANSITIONS.items():
        known = {
            "workflow": WorkflowStatus,
            "step": StepStatus,
            "attempt": states.AttemptStatus,
            "compensation": states.CompensationStatus,
            "policy_change": states.PolicyChangeStatus,
            "grant": states.GrantStatus,
        }[kind].values
        assert set(table) == set(known), kind
        for targets in table.values():
            assert targets <= set(known)


def test_a_lost_race_changes_nothing(workflow):
    stale = Workflow.objects.get(pk=workflow.pk)
    assert move(workflow, WorkflowStatus.CANCELLED, actor="test")
    assert not move(stale, WorkflowStatus.APPROVED, actor="test")
    assert Workflow.objects.get(pk=workflow.pk).status == "CANCELLED"
    assert not AuditEvent.objects.filter(verb="workflow.approved").exists()


def test_transition_and_audit_event_commit_or_roll_back_together(workflow):
    with pytest.raises(RuntimeError), transaction.atomic():
        move(workflow, WorkflowStatus.CANCELLED, actor="test")
        raise RuntimeError("crash before commit")
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"
    assert not AuditEvent.objects.filter(verb="workflow.cancelled").exists()


def test_every_transition_appends_a_chained_event(workflow):
    move(workflow, WorkflowStatus.CANCELLED, actor="reviewer")
    events = list(AuditEvent.objects.filter(workflow_id=workflow.pk).order_by("seq"))
    assert [e.verb for e in events] == ["workflow.submitted", "workflow.cancelled"]
    assert events[1].data == {"from": "PLANNED", "to": "CANCELLED"}
    assert events[1].prev_hash == events[0].hash
    assert journal.verify().ok


def test_audit_rows_refuse_save_and_delete_through_the_orm(workflow):
    event = AuditEvent.objects.first()
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()


def _raw(sql, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _disable_guard():
    """What an attacker with DBA rights would do first."""
    table = AuditEvent._meta.db_table
    if connection.vendor == "postgresql":
        # Every guard: the row trigger on UPDATE and the statement check on DELETE.
        _raw(f"ALTER TABLE {table} DISABLE TRIGGER USER")
    else:
        _raw("DROP TRIGGER workflows_auditevent_no_update")


def test_the_database_refuses_to_update_audit_rows(workflow):
    from django.db import DatabaseError

    event = AuditEvent.objects.first()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        _raw(f"UPDATE {AuditEvent._meta.db_table} SET actor = %s WHERE id = %s", ["mallory", event.pk])
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(actor="mallory")
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).delete()


def test_postgres_refuses_to_delete_audit_rows(workflow):
    from django.db import DatabaseError

    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL trigger; on SQLite the model and queryset refuse deletes")

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        _raw(f"DELETE FROM {AuditEvent._meta.db_table}")


def test_tampering_in_sql_is_detected(workflow, capsys):
    move(workflow, WorkflowStatus.CANCELLED, actor="reviewer")
    call_command("verify_audit")
    assert "audit chain OK" in capsys.readouterr().out
    event = AuditEvent.objects.get(verb="workflow.cancelled")
    _disable_guard()
    _raw(f"UPDATE {AuditEvent._meta.db_table} SET actor = %s WHERE id = %s", ["mallory", event.pk])
    result = journal.verify()
    assert not result.ok
    assert any("altered" in p for p in result.problems)
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="BROKEN"):
        call_command("verify_audit")


def test_a_removed_event_is_detected(workflow):
    move(workflow, WorkflowStatus.CANCELLED, actor="reviewer")
    _disable_guard()
    first = AuditEvent.objects.filter(workflow_id=workflow.pk).order_by("seq").first()
    _raw(f"DELETE FROM {AuditEvent._meta.db_table} WHERE id = %s", [first.pk])
    problems = journal.verify().problems
    assert problems and any("expected seq 1" in p or "does not link" in p for p in problems)


def test_audit_append_refuses_to_run_outside_a_transaction(transactional_db):
    with pytest.raises(RuntimeError):
        journal.append(actor="x", verb="y", obj_type="z", obj_id=1)


def test_an_event_inserted_around_the_head_is_detected(workflow):
    last = AuditEvent.objects.filter(workflow_id=workflow.pk).order_by("-seq").first()
    _raw(
        f"INSERT INTO {AuditEvent._meta.db_table} (stream, seq, at, actor, verb, object_type, object_id, "
        "workflow_id, data, prev_hash, hash, hash_alg, key_id) SELECT stream, seq + 1, at, 'mallory', verb, "
        f"object_type, object_id, workflow_id, data, hash, hash, hash_alg, key_id FROM {AuditEvent._meta.db_table} "
        "WHERE id = %s",
        [last.pk],
    )
    assert any("beyond the chain's head" in p for p in journal.verify().problems)
