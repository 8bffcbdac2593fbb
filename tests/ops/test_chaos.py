"""Chaos: workers SIGKILLed at random and their database sessions cut while
workflows run, and two clusters sharing one PostgreSQL as two hosts would.
No effect may happen twice and every workflow must settle."""

import os
import signal
import time
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Count

from tests.support import deciding as decide
from workflows.models import Attempt, Step, Workflow
from workflows.operations import plans
from workflows.ops import chaos, processes
from workflows.ops.bench.soak import SoakPart
from workflows.states import AttemptStatus, StepStatus


@pytest.mark.parametrize("duration", ["90", "2 m", "1.5m", "90x", "0s", "soon", ""])
def test_chaos_refuses_a_soak_that_is_not_a_duration_and_starts_nothing(duration, tmp_path):
    with pytest.raises(CommandError, match="--soak .*give a duration"):
        call_command("chaos", "--soak", duration, "--workdir", str(tmp_path / "chaos"))
    assert not (tmp_path / "chaos").exists(), "nothing was started"


def test_chaos_soak_starts_its_own_proof_desk(tmp_path):
    with pytest.raises(CommandError, match="drop --desk-url"):
        call_command("chaos", "--soak", "90s", "--desk-url", "http://127.0.0.1:9", "--workdir", str(tmp_path))


@pytest.fixture
def desk(proof_desk):
    """The soak's desk requires approval proofs (docs/explanation/approval-proofs.md#approval-proof) of every write."""
    return proof_desk


def start_clusters(start_worker, *names, **env):
    """Clusters as the soak wants them: short leases and task timeouts, and
    PostgreSQL sessions named so that only theirs are terminated."""
    return [
        start_worker(name, **{**chaos.CLUSTER_ENV, "PGAPPNAME": processes.session_name(name), **env}) for name in names
    ]


def test_the_chaos_soak_part_is_left_out_unless_a_duration_is_given(tmp_path):
    bench = SimpleNamespace(o=SimpleNamespace(soak=""), workdir=tmp_path, tag="t")
    assert SoakPart(bench).run()["skipped"] is True
    assert not any(tmp_path.iterdir()), "nothing was started"
    with pytest.raises(CommandError, match="--soak 'soon': give a duration"):
        call_command("bench", "--soak", "soon", "--workdir", str(tmp_path))


@pytest.mark.live
def test_soak_with_everything_at_once_settles_without_lost_or_duplicate_effects(start_worker, desk, tmp_path):
    """Two clusters of 64 effects in flight per worker, killed and cut off
    from the database, a desk requiring proofs and injecting faults, a
    webhook receiver down and back, an archive and a bulk reconcile run
    while work is in flight, and two reviewers approving from threads:
    what `manage.py chaos --soak` runs, for at most two minutes (a minute
    of faults, then at most 55 s to settle)."""
    clusters = start_clusters(start_worker, "chaos-a", "chaos-b")

    # Slow effects, so that kills land mid-effect; and a desk that ignores
    # idempotency keys, so that only reconciliation prevents a second ticket.
    desk_faults = [{"mode": "latency", "ms": 300}, {"mode": "ignore_idempotency"}]
    result = chaos.soak(
        clusters,
        desk_url=desk.url,
        workflows=96,
        seconds=60,
        kill_every=1.5,
        seed=7,
        settle_seconds=55,
        desk_faults=desk_faults,
        workdir=tmp_path / "chaos",
        storm=True,
        proofs=True,
        log=print,
    )

    print(result.report())
    assert result.unsettled == [], "every workflow ends terminal or waiting for an operator"
    assert result.duplicates == [] and result.ticket_problems == [], "each effect once on the desk"
    assert result.unrequested == [], "no effect without a committed REQUESTED attempt before it"
    assert result.double_successes == []
    assert result.audit_ok, result.audit_problems
    # Every effect came with an approval proof of its own plan, which the
    # desk verified (it refuses, changing nothing, any other), and none was refused.
    assert result.proof_problems == [] and result.proofs_verified == result.effects > 0
    # Every webhook the outbox recorded for the soak's plans arrived,
    # though the receiver was down for a while.
    assert result.receiver_outages >= 1 and result.webhook_retried > 0
    assert result.webhook_deliveries > 0 and result.webhook_missing == []
    # An archive ran while work was in flight: it took finished plans only,
    # and it verifies; the soak's checks above read those back from it.
    assert result.archive_runs == 1 and result.archived_workflows > 0 and result.archive_errors == []
    # A bulk reconcile sorted the dead letters the desk's refusals left.
    assert result.bulk_jobs and all(job["status"] == "DONE" and job["total"] > 0 for job in result.bulk_jobs)
    assert result.reviewer_approvals == 2 * result.workflows, "both reviewers' threads approved every plan"
    assert result.passed
    # The faults really happened: killed processes are gone, killed groups
    # were started again, and on PostgreSQL backends were terminated.
    assert result.kills and all(kill.proven for kill in result.kills)
    kinds = {kill.kind for kill in result.kills}
    assert {"child", "group"} <= kinds
    assert any(restart.reason == "group kill" for restart in result.restarts)
    assert any(kill.orphans for kill in result.kills), "at least one kill caught a step in flight"
    assert max(len(kill.orphans) for kill in result.kills) > 1, "a kill caught a worker with several effects in flight"
    assert {"error 503", "rate_limit", "commit_then_drop", "error 422"} <= set(result.desk_faults)
    if connection.vendor == "postgresql":
        assert result.terminated_sessions > 0
    assert result.unrecovered == 0
    summary = result.as_dict()
    assert summary["recovery_median_seconds"] is not None and summary["recovery_max_seconds"] is not None


@pytest.mark.live
def test_two_clusters_on_one_postgresql_one_killed_mid_run_the_other_finishes(start_worker, desk):
    if connection.vendor != "postgresql":
        pytest.skip(
            "two clusters as two hosts share one PostgreSQL (docs/explanation/architecture.md#processes); "
            "SQLite is the single-host default"
        )
    agent, reviewers = chaos.personas()
    # Each effect takes a second: whenever the freeze comes, even after a slow
    # host took long over the approvals, the last plans still have steps in flight.
    desk.fault(mode="latency", ms=1000)
    first, second = start_clusters(start_worker, "host-a", "host-b")
    workflows = []
    for number in range(20):
        workflow = plans.submit(agent, chaos.ticket_plan(f"two-hosts-{number}")).workflow
        workflows.append(decide.approve(workflow, by=reviewers[0]))
    steps = Step.objects.filter(workflow__in=workflows)
    first_pids, held = _freeze_holding_a_step(steps, first)

    first.kill()  # SIGKILL the whole (frozen) group, mid-step

    assert processes.gone(first_pids), "the killed cluster is gone"
    deadline = time.monotonic() + 40
    while Workflow.objects.filter(pk__in=[w.pk for w in workflows]).exclude(status="COMPLETE").exists():
        assert time.monotonic() < deadline, list(steps.exclude(status="COMPLETE").values_list("key", "status"))
        time.sleep(0.2)
    attempts = Attempt.objects.filter(step__in=steps)
    assert (
        not attempts.filter(status=AttemptStatus.SUCCEEDED)
        .values("step")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    ), "no step succeeded twice"
    tickets = desk.tickets()
    for key in steps.filter(action="ticket.create").values_list("operation_key", flat=True):
        assert [t["idempotency_key"] for t in tickets].count(key) == 1
    ledger_keys = [entry["idempotency_key"] for entry in desk.ledger()]
    assert len(ledger_keys) == len(set(ledger_keys)) == steps.count(), "one effect per operation"
    pids = {processes.owner_pid(worker) for worker in attempts.values_list("worker", flat=True)}
    second_pids = processes.group_pids(second.process.pid)
    assert pids & first_pids, "the killed cluster did work before it died"
    assert pids & second_pids, "the surviving cluster did work"
    # The steps the killed cluster held were finished by the survivor.
    for step in Step.objects.filter(pk__in=held):
        assert step.status == StepStatus.COMPLETE
        assert processes.owner_pid(step.lease_owner) in second_pids, (step.lease_owner, first_pids, second_pids)


@pytest.mark.live
def test_a_worker_killed_while_its_create_is_in_flight_leaves_one_ticket_on_a_desk_without_idempotency(
    start_worker, desk
):
    """The desk ignores Idempotency-Key (an API without idempotency whose
    lookup by key still works), so only reconciliation stands between a crash
    and a second ticket. The worker dies after sending its POST, which the
    desk is still working on; recovery looks the key up before that request
    lands, would find nothing, and would create the ticket again: so
    "not found" is trusted only once the earlier request can no longer land."""
    desk.fault(mode="latency", ms=4000, count=1)  # the first POST only: used up the moment it reaches the desk
    desk.fault(mode="ignore_idempotency")
    start_clusters(start_worker, "lonely", ACTION_TIMEOUT_SECONDS="6")
    agent, reviewers = chaos.personas()
    plan = {
        "name": "one ticket",
        "submission_key": "in-flight",
        "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "Lift stuck", "body": "B2"}}],
    }
    workflow = decide.approve(plans.submit(agent, plan).workflow, by=reviewers[0])
    step = workflow.steps.get()
    deadline = time.monotonic() + 20
    while any(fault["mode"] == "latency" for fault in desk.faults()):
        assert time.monotonic() < deadline, "the create never reached the desk"
        time.sleep(0.02)
    # The desk holds the POST inside its latency: kill the worker that sent it.
    attempt = Attempt.objects.get(step=step)
    victim = processes.owner_pid(attempt.worker)
    os.kill(victim, signal.SIGKILL)

    assert processes.gone([victim]), "the worker died with its request in flight"
    deadline = time.monotonic() + 30
    while Workflow.objects.get(pk=workflow.pk).status != "COMPLETE":
        assert time.monotonic() < deadline, list(Attempt.objects.filter(step=step).values_list("status", flat=True))
        time.sleep(0.2)
    # Each attempt sent one POST: wait until each has landed (the desk
    # ignores keys, so each is a line of its ledger), however late.
    sent = Attempt.objects.filter(step=step).count()
    deadline = time.monotonic() + 30
    while len(desk.ledger()) < sent:
        assert time.monotonic() < deadline, f"{sent} requests sent, {len(desk.ledger())} landed"
        time.sleep(0.2)
    assert [entry["path"] for entry in desk.ledger()][:1] == ["/tickets"], "the killed worker's request landed"
    assert len(desk.tickets(idempotency_key=step.operation_key)) == 1, list(
        Attempt.objects.filter(step=step).values_list("number", "status", "worker", "started_at", "finished_at")
    )


def _freeze_holding_a_step(steps, cluster, timeout=60.0, settle=15.0):
    """SIGSTOP the cluster's group at a moment it holds a step's lease, after
    some steps completed: returns its pids and the steps it holds, frozen
    in its hands until the SIGKILL. Each freeze has `settle` seconds of its
    own to settle, however late in `timeout` it came (a loaded host may take
    most of it to complete the first step)."""
    group = cluster.process.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if steps.filter(status=StepStatus.COMPLETE).exists():
            os.killpg(group, signal.SIGSTOP)
            pids = processes.group_pids(group)
            _wait_until_quiet(pids, processes.session_name(cluster.name), time.monotonic() + settle)
            held = [
                pk
                for pk, owner in steps.filter(status__in=[StepStatus.RUNNING, StepStatus.VERIFYING]).values_list(
                    "pk", "lease_owner"
                )
                if processes.owner_pid(owner) in pids
            ]
            if held:
                return pids, held
            os.killpg(group, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError("the first cluster never held a step")


def _wait_until_quiet(pids, session_name: str, deadline: float) -> None:
    """Every process of the group is stopped, and PostgreSQL has finished
    what they sent before the freeze: no session of theirs runs a statement,
    but for one waiting for a row lock that a frozen transaction holds, or
    for the rest of a message the frozen process was sending, or for it to
    read an answer (only the SIGKILL ends those). What the cluster holds now
    is what it holds when it is killed."""
    while True:
        stopped = all(_state(pid) in ("T", None) for pid in pids)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND state = 'active' AND wait_event_type IS DISTINCT FROM 'Lock' "
                "AND wait_event_type IS DISTINCT FROM 'Client'",
                [session_name],
            )
            (busy,) = cursor.fetchone()
        if stopped and not busy:
            return
        assert time.monotonic() < deadline, f"the frozen cluster did not settle: {busy} sessions busy"
        time.sleep(0.02)


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (T: stopped), None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
