"""Many remote effects in flight per worker (docs/explanation/concurrency.md#effects-in-flight), each with its own
claim, fence, committed REQUESTED attempt and lease: real clusters, the real
desk holding the requests with its latency fault, real SIGKILL and SIGSTOP."""

import os
import re
import signal
from collections import Counter

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Count

from tests.support.effects import (
    SLOW,
    approved_creates,
    assert_one_ticket_per_key,
    wait_complete,
    wait_for_desk_holding,
    wait_for_in_flight,
    wait_until,
)
from workflows.engine import failpoints
from workflows.models import Attempt, Step, Workflow
from workflows.ops import processes
from workflows.states import AttemptStatus, StepStatus, WorkflowStatus

# Also run through PgBouncer in transaction mode (make test-pooled).
pytestmark = [pytest.mark.live, pytest.mark.pooled]


def test_one_worker_keeps_64_effects_in_flight_and_each_is_checkpointed(people, start_worker, desk):
    desk.fault(mode="latency", ms=4000)
    workflows = approved_creates(people, 64, "wide")
    cluster = start_worker("wide", Q_WORKERS="1", WORKER_CONCURRENCY="64", **SLOW)

    in_flight = wait_for_in_flight(workflows, 64, cluster=cluster)

    # One worker process holds them all, each under its own claim and fence.
    assert len({attempt.worker for attempt in in_flight}) == 1
    steps = Step.objects.filter(workflow__in=workflows)
    assert steps.filter(status=StepStatus.RUNNING).count() == 64
    assert sorted(a.fence for a in in_flight) == sorted(steps.values_list("fence", flat=True))
    desk.clear_faults()
    wait_complete(workflows)
    assert_one_ticket_per_key(workflows, desk)
    assert not Attempt.objects.filter(step__workflow__in=workflows).exclude(status=AttemptStatus.SUCCEEDED).exists()


def test_four_workers_with_64_effects_each_in_flight_hold_a_small_fixed_number_of_connections(
    people, start_worker, desk
):
    """256 effects in flight at once against a server whose max_connections
    is 100: an effect holds no connection of its own."""
    if connection.vendor != "postgresql":
        pytest.skip("counts sessions in PostgreSQL's pg_stat_activity")
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        (max_connections,) = cursor.fetchone()
    desk.fault(mode="latency", ms=15000)
    # Each worker also claims three quarters of its room ahead: enough steps
    # for all four to fill their 64 places.
    workflows = approved_creates(people, 4 * 112, "budget")
    clusters = [
        start_worker(name, Q_WORKERS="2", WORKER_CONCURRENCY="64", **{**SLOW, "ACTION_TIMEOUT_SECONDS": "30"})
        for name in ("budget-a", "budget-b")
    ]

    in_flight = wait_for_in_flight(workflows, 256, timeout=90)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = ANY(%s) GROUP BY 1",
            [[processes.session_name(c.name) for c in clusters]],
        )
        sessions = dict(cursor.fetchall())
    workers = {attempt.worker for attempt in in_flight}
    assert len(workers) == 4, "four worker processes share the 256 effects"
    assert Counter(a.worker for a in in_flight).most_common(1)[0][1] <= 64
    # Per cluster: its main loop, the steps lane's sentinel's scheduler, each
    # lane's pusher's two (queue reads and LISTEN) and monitor's, and two per
    # worker of either lane (the worker's own and its lease heartbeat's):
    # 2(W + M) + 8, whatever in flight (docs/deploying.md#workers).
    per_cluster = 8 + 2 * (2 + settings.Q_MESSAGE_WORKERS)
    assert all(count <= per_cluster for count in sessions.values()), sessions
    assert sum(sessions.values()) < int(max_connections) < 256
    desk.clear_faults()
    wait_complete(workflows, timeout=120)
    assert_one_ticket_per_key(workflows, desk)


def test_sigkill_of_a_worker_with_64_effects_in_flight_reconciles_every_one_by_lookup(people, start_worker, desk):
    """The desk ignores idempotency keys: only the lookup stands between the
    crash and a second ticket. Every request the killed worker sent lands
    after it died; each step is reconciled, never performed again."""
    desk.fault(mode="latency", ms=3000)
    desk.fault(mode="ignore_idempotency")
    workflows = approved_creates(people, 64, "killed")
    doomed = start_worker("doomed", Q_WORKERS="1", WORKER_CONCURRENCY="64", **SLOW)
    in_flight = wait_for_in_flight(workflows, 64, cluster=doomed)
    wait_for_desk_holding(desk, 64)
    pids = processes.group_pids(doomed.process.pid)
    holder = processes.owner_pid(in_flight[0].worker)
    assert {processes.owner_pid(a.worker) for a in in_flight} == {holder}

    doomed.kill()  # SIGKILL, the whole group, 64 effects in flight

    assert processes.gone(pids | {holder}), "the killed processes are gone"
    desk.clear_faults()
    desk.fault(mode="ignore_idempotency")
    # A lookup's "not found" is trusted ACTION_TIMEOUT + grace after an
    # attempt's REQUESTED commit; its request left a moment later (64 sent
    # one after another: up to 2 s on a loaded host) and lands 3 s after
    # that. A grace of the desk's own 3 s keeps that margin whatever the
    # load (0.5 s once left a request landing after the lookup trusted it).
    start_worker("after", Q_WORKERS="1", WORKER_CONCURRENCY="64", **{**SLOW, "RECONCILE_GRACE_SECONDS": "3"})
    wait_complete(workflows)
    assert_one_ticket_per_key(workflows, desk)
    attempts = Attempt.objects.filter(step__workflow__in=workflows)
    assert Counter(attempts.filter(number=1).values_list("status", flat=True)) == {AttemptStatus.RECONCILED: 64}
    assert set(reconciled_found(attempts).values()) == {True}, "each was found by its operation key"
    assert not attempts.filter(number__gt=1).exists(), "found by lookup: never sent again"
    steps = Step.objects.filter(workflow__in=workflows)
    assert steps.filter(status=StepStatus.COMPLETE).count() == 64


def reconciled_found(attempts) -> dict:
    """Each reconciled attempt's step: whether the lookup found its effect."""
    from workflows.models import AuditEvent

    by_attempt = {str(a.pk): a.step_id for a in attempts}
    events = AuditEvent.objects.filter(verb="attempt.reconciled", object_id__in=list(by_attempt))
    return {by_attempt[event.object_id]: event.data["found"] for event in events}


def test_sigkill_with_64_undeclared_webhooks_in_flight_leaves_each_in_doubt_never_repeated(people, start_worker, desk):
    """No lookup and not idempotent: each interrupted effect waits IN_DOUBT."""
    desk.fault(mode="latency", ms=3000)
    workflows = approved_creates(
        people, 64, "hooks", action="http.post", args={"url": f"{desk.url}/tickets", "json": {"title": "hook"}}
    )
    doomed = start_worker("doomed", Q_WORKERS="1", WORKER_CONCURRENCY="64", **SLOW)
    wait_for_in_flight(workflows, 64, cluster=doomed)
    wait_for_desk_holding(desk, 64)

    doomed.kill()

    desk.clear_faults()
    start_worker("after", Q_WORKERS="1", WORKER_CONCURRENCY="64", **SLOW)
    pks = [w.pk for w in workflows]
    wait_until(
        lambda: Workflow.objects.filter(pk__in=pks, status=WorkflowStatus.NEEDS_ATTENTION).count() == 64,
        60,
        lambda: Counter(Workflow.objects.filter(pk__in=pks).values_list("status", flat=True)),
    )
    steps = Step.objects.filter(workflow__in=workflows)
    assert steps.filter(status=StepStatus.IN_DOUBT).count() == 64
    assert Attempt.objects.filter(step__in=steps).count() == 64, "none was sent a second time"
    # Every request the killed worker sent lands, once.
    landed = lambda: [e for e in desk.ledger() if e["path"] == "/tickets"]  # noqa: E731
    wait_until(lambda: len(landed()) >= 64, 30, lambda: f"{len(landed())} landed")
    assert Counter(e["idempotency_key"] for e in landed()) == Counter(steps.values_list("operation_key", flat=True))


def test_a_frozen_worker_loses_its_leases_and_its_late_answers_are_refused_by_the_fence(people, start_worker, desk):
    if connection.vendor != "postgresql":
        pytest.skip(
            "SQLite has one writer: a worker frozen inside a write transaction holds the whole database, "
            "so no other worker can take over until it resumes (the single-host default)"
        )
    desk.fault(mode="latency", ms=3000)
    workflows = approved_creates(people, 16, "frozen")
    # Stopped inside a transaction (a lease beat, a tick), it would hold its
    # row locks until PostgreSQL ends the session (behind PgBouncer, at its
    # idle_transaction_timeout); the rescuer's recovery passes over those
    # rows meanwhile.
    frozen = start_worker("frozen", Q_WORKERS="1", WORKER_CONCURRENCY="64", DB_IDLE_IN_TRANSACTION_SECONDS="4", **SLOW)
    in_flight = wait_for_in_flight(workflows, 16, cluster=frozen)
    first_owner = in_flight[0].worker

    os.killpg(frozen.process.pid, signal.SIGSTOP)  # heartbeat and all: the leases run out
    try:
        rescuer = start_worker("rescuer", Q_WORKERS="1", WORKER_CONCURRENCY="64", **SLOW)
        wait_complete(workflows, timeout=60)
    finally:
        os.killpg(frozen.process.pid, signal.SIGCONT)

    # The frozen worker now receives the desk's answers and tries to record
    # them: each is refused, because the step carries the rescuer's fence.
    wait_until(
        lambda: len(re.findall(r"lease on step \d+ was taken over", frozen.log())) >= 16,
        30,
        lambda: frozen.log()[-3000:],
    )
    steps = Step.objects.filter(workflow__in=workflows)
    rescuer_pids = processes.group_pids(rescuer.process.pid)
    assert all(processes.owner_pid(owner) in rescuer_pids for owner in steps.values_list("lease_owner", flat=True))
    first = Attempt.objects.filter(step__in=steps, worker=first_owner)
    assert first.count() == 16
    assert set(first.values_list("status", flat=True)) == {AttemptStatus.RECONCILED}, "no late SUCCEEDED"
    assert (
        not Attempt.objects.filter(step__in=steps, status=AttemptStatus.SUCCEEDED)
        .values("step")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    )
    assert_one_ticket_per_key(workflows, desk)


def limit(people, action: str, **changes):
    """An operator tightens the action's policy (alone: a tightening)."""
    from workflows.operations import policies

    return policies.change(action, by=people["operator"], reason="load test", changes=changes)


@pytest.mark.parametrize("room", [64, 2])
def test_max_in_flight_holds_across_two_clusters_of_two_workers_counted_at_the_desk(people, start_worker, desk, room):
    """Four worker processes and a limit of 5 in flight for ticket.create
    across all of them: the desk never holds more than 5 of its POSTs at
    once. With room for 64 each, any one worker could exceed it alone; with
    room for 2 each, the limit can only be reached by several together."""
    limit(people, "ticket.create", max_in_flight=5)
    desk.fault(mode="latency", ms=400)
    desk.reset_concurrency()
    workflows = approved_creates(people, 40, "limited")
    for name in ("limit-a", "limit-b"):
        start_worker(name, Q_WORKERS="2", WORKER_CONCURRENCY=str(room), **SLOW)

    wait_complete(workflows, timeout=120)

    held = desk.concurrency()["max_in_flight"]["POST /tickets"]
    assert 2 <= held <= 5, held
    assert_one_ticket_per_key(workflows, desk)
    if room == 2:
        workers = set(Attempt.objects.filter(step__workflow__in=workflows).values_list("worker", flat=True))
        assert len(workers) > 1, "several workers took part"


def test_a_saturated_slow_action_does_not_delay_other_actions(people, start_worker, desk, tmp_path):
    """ticket.create is slow (3 s at the desk) and held to 2 in flight; its 30
    steps are approved first, so they are first in line. noop steps and
    webhooks to a fast receiver, approved after them, still finish while
    nearly all the slow steps wait: they are not queued behind them."""
    from tests.support.desk import TicketDesk

    limit(people, "ticket.create", max_in_flight=2)
    desk.fault(mode="latency", ms=3000)
    desk.reset_concurrency()
    slow = approved_creates(people, 30, "slow")
    with TicketDesk(tmp_path / "fast.sqlite3") as fast:
        hooks = approved_creates(
            people,
            20,
            "hook",
            action="http.post",
            args={"url": f"{fast.url}/tickets", "json": {"title": "fast"}, "receiver_honours_idempotency_key": True},
        )
        noops = approved_creates(people, 20, "noop", action="noop", args={"n": 1})
        start_worker("mixed", Q_WORKERS="2", WORKER_CONCURRENCY="64", **SLOW)

        wait_complete(hooks + noops, timeout=60)

        slow_done = Step.objects.filter(workflow__in=slow, status=StepStatus.COMPLETE).count()
        assert slow_done <= 10, f"{slow_done} of 30 slow steps done: the others waited behind them"
        assert len([e for e in fast.ledger() if e["path"] == "/tickets"]) == 20
    assert desk.concurrency()["max_in_flight"]["POST /tickets"] <= 2


@pytest.mark.parametrize("point", failpoints.ALL)
def test_a_crash_at_each_checkpoint_with_16_effects_in_flight_recovers_each_with_one_effect(
    people, start_worker, desk, tmp_path, point
):
    """The crash matrix with many effects in flight: sixteen one-step plans
    are claimed, requested and sent together, and the worker dies at the
    point with all of them in its hands. The desk ignores idempotency keys,
    so only reconciliation stands between the crash and a second ticket."""
    from tests.support.crashing import crash_at

    desk.fault(mode="ignore_idempotency")
    workflows = approved_creates(people, 16, f"matrix-{point}")
    crash_at(start_worker, tmp_path, point, Q_WORKERS="1", WORKER_CONCURRENCY="64")

    wait_complete(workflows, timeout=90)

    assert_one_ticket_per_key(workflows, desk)
    keys = [e["idempotency_key"] for e in desk.ledger()]
    assert len(keys) == len(set(keys)) == 16, "one effect per operation key"
    attempts = Attempt.objects.filter(step__workflow__in=workflows)
    # Every attempt that was requested before the crash ended settled, never SUCCEEDED twice.
    assert not attempts.filter(status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN]).exists()
    assert (
        not attempts.filter(status=AttemptStatus.SUCCEEDED)
        .values("step")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    )
