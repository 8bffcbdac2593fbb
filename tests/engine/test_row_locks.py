"""Row locks held by another session, as a worker's own thread holds them
while recording outcomes, or a process stopped inside a transaction holds
them until its session ends: the lease heartbeat and lease recovery pass
over such a row rather than wait behind it, and PostgreSQL ends a session
left idle in a transaction (docs/deploying.md#postgresql)."""

import re
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from workflows.engine import execution, leases, recovery
from workflows.models import Step
from workflows.operations import plans
from workflows.ops import processes
from workflows.states import StepStatus


@pytest.mark.django_db(transaction=True)
def test_the_lease_heartbeat_never_waits_for_a_row_the_worker_is_recording(people, desk):
    """The worker's own thread locks its steps in id order to record their
    outcomes; a heartbeat that waited for those locks while holding others
    deadlocked with it (seen with 64 effects in flight). A beat skips the
    rows locked right now and extends the rest."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: SQLite locks the whole database")
    first, second = [
        decide.approve(plans.submit(people["agent"], ticket_plan(key)).workflow, by=people["reviewer"])
        for key in ("beat-1", "beat-2")
    ]
    claimed = execution.claim_batch(workflow_id=[first.pk, second.pk], alone=2)
    assert len(claimed) == 2
    locked, free = sorted(claimed, key=lambda step: step.pk)
    before = {step.pk: step.lease_expires_at for step in claimed}
    held = leases.Q(pk=locked.pk, fence=locked.fence) | leases.Q(pk=free.pk, fence=free.fence)
    with psycopg.connect(processes.database_url(), autocommit=False) as other:
        other.execute(f"SELECT id FROM {Step._meta.db_table} WHERE id = %s FOR UPDATE", [locked.pk])
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")  # a wait would fail the beat, not hang the test
            extended = leases._extend(held, 60)
        other.rollback()
    assert extended == {free.pk}
    after = dict(Step.objects.filter(pk__in=before).values_list("pk", "lease_expires_at"))
    assert after[locked.pk] == before[locked.pk], "the locked row was skipped, not waited for"
    assert after[free.pk] > before[free.pk] + timedelta(seconds=30)


@pytest.mark.django_db(transaction=True)
def test_recovery_passes_over_a_row_locked_by_a_stopped_process_and_takes_it_once_free(people, desk):
    """A process stopped inside a transaction (SIGSTOP, a hang) keeps its
    row locks: recovery waiting for one would stop the worker loop, and
    with it every other recovery and the heartbeat a supervisor watches.
    It takes the leases it can and comes back for the locked one."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: SQLite locks the whole database")
    first, second = [
        decide.approve(plans.submit(people["agent"], ticket_plan(key)).workflow, by=people["reviewer"])
        for key in ("stopped-1", "stopped-2")
    ]
    locked, free = sorted(execution.claim_batch(workflow_id=[first.pk, second.pk], alone=2), key=lambda s: s.pk)
    later = timezone.now() + timedelta(hours=1)
    with psycopg.connect(processes.database_url(), autocommit=False) as other:
        other.execute(f"SELECT id FROM {Step._meta.db_table} WHERE id = %s FOR UPDATE", [locked.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")  # a wait fails the test, not hangs it
        try:
            assert recovery.recover_expired_leases(now=later) == 1
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        statuses = dict(Step.objects.filter(pk__in=[locked.pk, free.pk]).values_list("pk", "status"))
        assert statuses == {locked.pk: StepStatus.RUNNING, free.pk: StepStatus.WAITING_RETRY}
        other.rollback()
    assert recovery.recover_expired_leases(now=later) == 1, "taken at the next look, once free"
    assert Step.objects.get(pk=locked.pk).status == StepStatus.WAITING_RETRY


@pytest.mark.django_db(transaction=True)
def test_postgresql_ends_a_session_left_idle_inside_a_transaction(settings):
    """DB_IDLE_IN_TRANSACTION_SECONDS: the sessions Django opens ask
    PostgreSQL to end themselves when left idle in a transaction, so that
    a stopped process's row locks do not outlive it for ever."""
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL session setting")
    given = settings.DATABASES["default"]["OPTIONS"]["options"]
    milliseconds = int(re.search(r"idle_in_transaction_session_timeout=(\d+)", given).group(1))
    assert milliseconds > 0, "on unless turned off"
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting::int FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'")
        assert cursor.fetchone()[0] == milliseconds
    # The same option on a session of its own, shortened: the server ends it.
    options = settings.DATABASES["default"]["OPTIONS"]["options"].replace(f"={milliseconds}", "=300")
    with psycopg.connect(processes.database_url(), options=options, autocommit=False) as stopped:
        stopped.execute("SELECT 1")  # a transaction is open, and nothing more comes
        time.sleep(1.0)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            stopped.execute("SELECT 1")
