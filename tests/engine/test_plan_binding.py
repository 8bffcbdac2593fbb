"""An approval binds to what runs (docs/explanation/trust-core.md#plan-binding): the plan hash is recomputed
from the stored steps at every claim, and only approvals sealed with the
audit key count. The attacker here can write to the database, not read the
key."""

import importlib
import json
from datetime import timedelta

import pytest
import requests
from django.apps import apps
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.deadletters import BAD
from tests.support.plans import ticket_plan
from tests.support.running import run_until, wait_for_status
from workflows import tasks
from workflows.audit import keys
from workflows.db import canonical_json, sha256_hex
from workflows.engine import binding, execution, policy
from workflows.errors import WrongState
from workflows.models import Approval, Attempt, AuditEvent, Compensation, DeadLetter, Step, Workflow
from workflows.operations import compensation, deadletters, plans

TAMPERED = {"title": "Printer on fire", "body": "Also grant user mallory admin rights"}


def sql(statement: str, *params) -> int:
    """A write as a database user would make it: past the models and the engine."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.rowcount


def db_uuid(value) -> str:
    return Workflow._meta.pk.get_db_prep_value(value, connection)


def set_args(workflow, key: str, args: dict) -> None:
    assert (
        sql(
            f"UPDATE {Step._meta.db_table} SET args = %s WHERE workflow_id = %s AND key = %s",
            json.dumps(args),
            db_uuid(workflow.pk),
            key,
        )
        == 1
    )
    assert Step.objects.get(workflow=workflow, key=key).args == args  # the edit really landed


def rewrite_hashes(workflow, key: str, args: dict) -> str:
    """Everything a database writer can make consistent without the key:
    the stored plan, its hash, and the approvals' hashes."""
    plan = [{**step, "args": args} if step["key"] == key else step for step in workflow.plan]
    new_hash = sha256_hex(canonical_json(plan))
    sql(
        f"UPDATE {Workflow._meta.db_table} SET plan = %s, plan_hash = %s WHERE id = %s",
        json.dumps(plan),
        new_hash,
        db_uuid(workflow.pk),
    )
    sql(f"UPDATE {Approval._meta.db_table} SET plan_hash = %s WHERE workflow_id = %s", new_hash, db_uuid(workflow.pk))
    return new_hash


def blocked_problems(workflow) -> str:
    (event,) = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked")
    return " | ".join(event.data["problems"])


def approved(people, body):
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer"])
    workflow.refresh_from_db()
    return workflow


def noop_plan(key: str, steps: int = 3) -> dict:
    return {
        "name": key,
        "submission_key": key,
        "steps": [{"key": f"s{n}", "action": "noop", "args": {"n": n}} for n in range(steps)],
    }


@pytest.mark.live
def test_args_changed_after_approval_are_blocked_before_any_effect(people, start_worker, desk):
    workflow = approved(people, ticket_plan())
    set_args(workflow, "open", TAMPERED)

    start_worker()
    wait_for_status(workflow.pk, "FAILED")

    step = Step.objects.get(workflow=workflow, key="open")
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert "the plan no longer matches what was approved" in blocked_problems(workflow)
    assert desk.ledger() == []
    assert not Attempt.objects.filter(step__workflow=workflow).exists()


@pytest.mark.live
def test_rewriting_the_stored_hashes_too_is_caught_by_the_seal(people, start_worker, desk):
    workflow = approved(people, ticket_plan())
    set_args(workflow, "open", TAMPERED)
    new_hash = rewrite_hashes(workflow, "open", TAMPERED)
    # Every stored hash now agrees with the tampered steps: only the MAC can tell.
    assert binding.stored_hashes([(workflow.pk, 0)])[workflow.pk, 0] == new_hash
    assert set(Approval.objects.filter(workflow=workflow).values_list("plan_hash", flat=True)) == {new_hash}
    assert Workflow.objects.get(pk=workflow.pk).plan_hash == new_hash

    start_worker()
    wait_for_status(workflow.pk, "FAILED")

    step = Step.objects.get(workflow=workflow, key="open")
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert "1 whose seal does not verify" in blocked_problems(workflow)
    assert desk.ledger() == []
    assert not Attempt.objects.filter(step__workflow=workflow).exists()


def forged_none(approval_fields):
    return "", ""


def forged_hex(approval_fields):
    return "f" * 64, keys.current().kid


def forged_not_ascii(approval_fields):
    return "é" * 64, keys.current().kid


def sealed_by_unknown_key(approval_fields):
    approval = Approval(**approval_fields)
    binding.seal(approval, keys.AuditKey("elsewhere", b"a key the console does not hold"))
    return approval.mac, approval.key_id


@pytest.mark.parametrize("forge", [forged_none, forged_hex, forged_not_ascii, sealed_by_unknown_key])
def test_an_approval_written_into_the_database_does_not_count(people, desk, forge):
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    now = timezone.now()
    fields = {
        "workflow_id": workflow.pk,
        "reviewer_id": people["reviewer"].pk,
        "decision": "APPROVE",
        "plan_hash": workflow.plan_hash,
        "created_at": now,
    }
    mac, key_id = forge(fields)
    sql(
        f"INSERT INTO {Approval._meta.db_table} (workflow_id, reviewer_id, decision, comment, plan_hash, "
        "created_at, mac, key_id) VALUES (%s, %s, %s, '', %s, %s, %s, %s)",
        db_uuid(workflow.pk),
        people["reviewer"].pk,
        "APPROVE",
        workflow.plan_hash,
        connection.ops.adapt_datetimefield_value(now),
        mac,
        key_id,
    )
    # ... and sets the plan going, as the approval would have.
    sql(f"UPDATE {Workflow._meta.db_table} SET status = 'APPROVED' WHERE id = %s", db_uuid(workflow.pk))
    sql(
        f"UPDATE {Step._meta.db_table} SET next_attempt_at = %s WHERE workflow_id = %s AND key = 'open'",
        connection.ops.adapt_datetimefield_value(now),
        db_uuid(workflow.pk),
    )
    assert Approval.objects.filter(workflow=workflow, reviewer=people["reviewer"]).count() == 1

    assert policy.valid_approvals(workflow, [policy.policy_for("ticket.create")]) == []
    run_until(workflow.pk, "FAILED")

    step = Step.objects.get(workflow=workflow, key="open")
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert "0 of 1 required" in blocked_problems(workflow)
    assert desk.ledger() == []
    assert not Attempt.objects.exists()


def test_shared_batches_block_a_changed_plan_and_run_the_rest(people):
    tampered = approved(people, noop_plan("tampered"))
    intact = approved(people, noop_plan("intact"))
    set_args(tampered, "s0", {"n": 0, "also": "exfiltrate"})

    batch = execution.claim_batch()

    first = {step.workflow_id: step for step in batch}
    assert first.keys() == {tampered.pk, intact.pk}
    assert first[tampered.pk].attempt is None  # failed the recheck in the claim: no REQUESTED attempt
    assert first[intact.pk].attempt is not None
    execution.run_batch(batch)
    tasks.run_workflow(str(intact.pk))

    step = Step.objects.get(workflow=tampered, key="s0")
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert "the plan no longer matches what was approved" in blocked_problems(tampered)
    assert not Attempt.objects.filter(step__workflow=tampered).exists()
    assert Workflow.objects.get(pk=tampered.pk).status == "FAILED"
    assert Workflow.objects.get(pk=intact.pk).status == "COMPLETE"


def test_every_attempt_records_the_plan_hash_it_ran_under(people, desk):
    tickets = approved(people, ticket_plan())
    noops = approved(people, noop_plan("noops"))

    # The ticket steps run one at a time (`execute`), the noops in shared batches (`_request_shared`).
    run_until(tickets.pk, "COMPLETE")
    run_until(noops.pk, "COMPLETE")

    for workflow in (tickets, noops):
        assert Workflow.objects.get(pk=workflow.pk).status == "COMPLETE"
        hashes = list(Attempt.objects.filter(step__workflow=workflow).values_list("plan_hash", flat=True))
        assert hashes == [workflow.plan_hash] * 3
    assert len(desk.ledger()) == 3


def test_an_undo_records_the_hash_of_the_compensation_it_runs(people, desk):
    workflow = approved(people, ticket_plan())
    run_until(workflow.pk, "COMPLETE")
    comp = compensation.request(workflow, by=people["operator"], reason="opened by mistake")
    decide.authorize(comp, by=people["reviewer"])
    run_until(workflow.pk, "COMPENSATED")

    undo = list(Step.objects.filter(workflow=workflow, lane=comp.lane).order_by("position"))
    lane_hash = binding.plan_hash([binding.entry(s.key, s.action, s.args, s.compensation) for s in undo])
    recorded = set(Attempt.objects.filter(step__in=undo).values_list("plan_hash", flat=True))
    assert undo and recorded == {lane_hash}
    assert lane_hash != workflow.plan_hash


def one_ticket(key="one"):
    return {
        "name": "one ticket",
        "submission_key": key,
        "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire", "body": "3"}}],
    }


def authorized_undo(people):
    workflow = approved(people, one_ticket())
    run_until(workflow.pk, "COMPLETE")
    comp = compensation.request(workflow, by=people["operator"], reason="opened by mistake")
    decide.authorize(comp, by=people["reviewer"])
    comp.refresh_from_db()
    return workflow, comp


def someone_elses_ticket(desk) -> int:
    answer = requests.post(
        f"{desk.url}/tickets",
        json={"title": "Another customer's", "body": "keep open"},
        headers={"Idempotency-Key": "someone-else"},
        timeout=10,
    )
    assert answer.status_code == 201
    return answer.json()["id"]


def change_undo_args(workflow, comp, desk, people) -> None:
    (undo,) = Step.objects.filter(workflow=workflow, lane=comp.lane)
    set_args(workflow, undo.key, {"ticket_id": someone_elses_ticket(desk)})


def change_undo_args_and_the_authorized_hash(workflow, comp, desk, people) -> None:
    change_undo_args(workflow, comp, desk, people)
    (undo,) = Step.objects.filter(workflow=workflow, lane=comp.lane)
    new_hash = binding.plan_hash([binding.entry(undo.key, undo.action, undo.args, None)])
    sql(f"UPDATE {Compensation._meta.db_table} SET plan_hash = %s WHERE id = %s", new_hash, db_uuid(comp.pk))
    assert binding.stored_hashes([(workflow.pk, comp.lane)])[workflow.pk, comp.lane] == new_hash


def swap_authorizer(workflow, comp, desk, people) -> None:
    sql(
        f"UPDATE {Compensation._meta.db_table} SET authorized_by_id = %s WHERE id = %s",
        people["admin"].pk,
        db_uuid(comp.pk),
    )


@pytest.mark.parametrize(
    "tamper, why",
    [
        (change_undo_args, "the undo no longer matches what was authorized"),
        (change_undo_args_and_the_authorized_hash, "the authorization's seal does not verify"),
        (swap_authorizer, "the authorization's seal does not verify"),
    ],
)
def test_an_undo_changed_after_its_authorization_is_blocked(people, desk, tamper, why):
    workflow, comp = authorized_undo(people)
    tamper(workflow, comp, desk, people)
    before = desk.ledger()

    run_until(workflow.pk, "COMPENSATION_FAILED")

    (undo,) = Step.objects.filter(workflow=workflow, lane=comp.lane)
    assert (undo.status, undo.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert why in blocked_problems(workflow)
    assert desk.ledger() == before  # nothing closed, neither ticket
    assert not undo.attempts.exists()


def test_the_replay_preview_shows_a_plan_that_no_longer_matches(people, desk):
    workflow = approved(people, BAD)
    run_until(workflow.pk, "FAILED")
    entry = DeadLetter.objects.get(workflow=workflow)
    (before,) = deadletters.preview([entry])
    assert before.will_run

    set_args(workflow, "note", {"ticket_id": 1, "body": "somewhere else"})

    (after,) = deadletters.preview([entry])
    checks = {check.name: check for check in after.checks}
    assert not after.will_run
    assert not checks["plan as approved"].ok
    assert "the plan no longer matches what was approved" in checks["plan as approved"].detail
    with pytest.raises(WrongState, match="no longer matches what was approved"):
        deadletters.replay(entry, by=people["operator"], reason="try again")
    assert DeadLetter.objects.get(pk=entry.pk).status == "OPEN"


def fields_of(approval: Approval) -> dict:
    return {field.attname: getattr(approval, field.attname) for field in Approval._meta.concrete_fields}


@pytest.fixture
def audit_keys_setting(settings):
    """Change AUDIT_KEYS for one test; the cached key set follows."""

    def use(value: str) -> None:
        settings.AUDIT_KEYS = value
        keys.audit_keys.cache_clear()

    yield use
    keys.audit_keys.cache_clear()


def test_the_seal_is_made_with_the_audit_key(people, audit_keys_setting):
    original = keys.current()
    workflow = approved(people, noop_plan("keyed"))
    (approval,) = Approval.objects.filter(workflow=workflow)
    assert approval.key_id == original.kid and len(approval.mac) == 64
    assert binding.verifies(approval)
    step = Step.objects.select_related("workflow").get(workflow=workflow, key="s0")
    assert not policy.problems(policy.evaluate(step))

    audit_keys_setting("other:" + "x" * 32)  # another deployment's key: this approval is not its own
    assert not binding.verifies(approval)
    assert policy.valid_approvals(workflow, [policy.policy_for("noop")]) == []
    assert "whose seal does not verify" in " ".join(policy.problems(policy.evaluate(step)))

    # Rotation: a new signing key, the old one still listed, and the approval still verifies.
    audit_keys_setting(f"new:{'y' * 32},{original.kid}:{original.secret.decode()}")
    assert binding.verifies(approval)
    assert not policy.problems(policy.evaluate(step))

    # Any field the seal covers, changed, breaks it.
    for change in (
        {"reviewer_id": people["reviewer2"].pk},
        {"decision": "REJECT"},
        {"created_at": approval.created_at - timedelta(seconds=1)},
    ):
        assert not binding.verifies(Approval(**{**fields_of(approval), **change}))


def test_the_recheck_reads_every_plan_of_a_batch_in_one_query(people):
    def recheck_queries(count: int, tag: str) -> int:
        workflows = [approved(people, noop_plan(f"{tag}{n}", steps=2)) for n in range(count)]
        steps = list(Step.objects.select_related("workflow").filter(workflow__in=workflows, key="s0"))
        with CaptureQueriesContext(connection) as queries:
            checks = policy.evaluate_many(steps)
        assert all(not policy.problems(c) for c in checks.values())
        return len(queries)

    assert recheck_queries(2, "small") == recheck_queries(8, "large")


def test_upgrade_seals_the_decisions_that_still_match_their_steps(people, desk):
    kept = approved(people, noop_plan("kept"))
    changed = approved(people, noop_plan("changed"))
    undone, comp = authorized_undo(people)
    # As rows written before decisions were sealed: no MAC, and one plan edited since.
    Approval.objects.update(mac="", key_id="")
    Compensation.objects.update(mac="", key_id="", plan_hash="")
    set_args(changed, "s1", {"n": 1, "also": "more"})

    migration = next(
        m
        for (app, name), m in MigrationLoader(connection).disk_migrations.items()
        if app == "workflows" and name.endswith("_plan_binding_seals")
    )
    importlib.import_module(migration.__module__).seal_existing_decisions(apps, None)

    sealed = Approval.objects.get(workflow=kept)
    assert sealed.key_id == keys.current().kid and binding.verifies(sealed)
    assert binding.verifies(Approval.objects.get(workflow=undone))
    assert Approval.objects.get(workflow=changed).mac == ""
    comp.refresh_from_db()
    assert binding.verifies(comp)
    assert comp.plan_hash == binding.stored_hashes([(undone.pk, comp.lane)])[undone.pk, comp.lane]


def test_numbers_the_database_stores_its_own_way_still_run(people):
    """PostgreSQL's jsonb gives 1e+16 back as an integer and -0.0 as 0.0:
    the plan hash approvals bind to is that of the steps as stored, or such a
    plan could never run."""
    body = {
        "name": "numbers",
        "submission_key": "numbers",
        "steps": [{"key": "s0", "action": "noop", "args": {"big": 1e16, "zero": -0.0, "tiny": 1.5e-7}}],
    }
    workflow = approved(people, body)
    assert workflow.plan_hash == binding.stored_hashes([(workflow.pk, 0)])[workflow.pk, 0]
    run_until(workflow.pk, "COMPLETE")
