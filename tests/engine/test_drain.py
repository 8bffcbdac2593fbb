"""`manage.py drain`: a cluster stops claiming, finishes the effects it has
in flight, gives back what it claimed ahead, and exits; nothing is cut short
and nothing is sent twice. Real cluster, real desk holding the effects."""

import io
import os
import signal
import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django_q.cluster import get_mp_context

from tests.support.effects import (
    SLOW,
    approved_creates,
    assert_one_ticket_per_key,
    wait_complete,
    wait_for_desk_holding,
    wait_for_in_flight,
)
from workflows.management.commands.qcluster import set_event
from workflows.models import Attempt, AuditEvent, Step
from workflows.ops import processes
from workflows.states import AttemptStatus, StepStatus

pytestmark = pytest.mark.live


def drain(**options) -> str:
    """`manage.py drain`, in this process: it signals the cluster at once,
    while the desk still holds the effects (a second Django process would
    take its own start-up time first)."""
    out = io.StringIO()
    call_command("drain", stdout=out, **options)
    return out.getvalue()


def test_a_drained_cluster_finishes_its_effects_in_flight_claims_nothing_more_and_exits(people, start_worker, desk):
    desk.fault(mode="latency", ms=5000)
    workflows = approved_creates(people, 12, "drained")
    # Four places in flight, three more claimed ahead of them.
    cluster = start_worker("drained", Q_WORKERS="1", WORKER_CONCURRENCY="4", **{**SLOW, "ACTION_TIMEOUT_SECONDS": "10"})
    in_flight = wait_for_in_flight(workflows, 4, cluster=cluster)
    wait_for_desk_holding(desk, 4)
    group = processes.group_pids(cluster.process.pid)

    said = drain(heartbeat_file=str(cluster.heartbeat_file))

    assert f"cluster {cluster.process.pid}: claiming stopped; 4 effect(s) in flight" in said
    assert f"cluster {cluster.process.pid} drained" in said
    assert cluster.process.wait(10) is not None and processes.gone(group), "the whole cluster exited"
    # The effects in flight were finished by the worker that sent them, not
    # left to recovery, and nothing was sent after the drain began.
    attempts = Attempt.objects.filter(step__workflow__in=workflows)
    assert sorted(attempts.values_list("pk", flat=True)) == sorted(a.pk for a in in_flight)
    assert set(attempts.values_list("status", flat=True)) == {AttemptStatus.SUCCEEDED}
    steps = Step.objects.filter(workflow__in=workflows)
    assert steps.filter(status=StepStatus.COMPLETE).count() == 4
    assert not steps.filter(status__in=[StepStatus.RUNNING, StepStatus.VERIFYING]).exists()
    # What it had claimed ahead went back in line at once, unsent.
    released = AuditEvent.objects.filter(verb="step.released", workflow_id__in=[w.pk for w in workflows])
    assert released.count() == 3
    assert steps.filter(status=StepStatus.WAITING_RETRY, lease_owner="", attempts__isnull=True).count() == 3
    assert_one_ticket_per_key([a.step.workflow for a in in_flight], desk)

    desk.clear_faults()
    start_worker("after", **SLOW)
    wait_complete(workflows)
    assert_one_ticket_per_key(workflows, desk)
    assert not Attempt.objects.filter(step__workflow__in=workflows).exclude(status=AttemptStatus.SUCCEEDED).exists()


def test_drain_refuses_what_is_not_a_cluster_and_changes_nothing(db, tmp_path):
    with pytest.raises(CommandError, match="is not a qcluster"):
        call_command("drain", pid=os.getpid())
    with pytest.raises(CommandError, match="cannot read a cluster's pid"):
        call_command("drain", heartbeat_file=str(tmp_path / "missing"))
    garbled = tmp_path / "garbled"
    garbled.write_text("not-a-pid 1.0\n")
    with pytest.raises(CommandError, match="does not start with a pid"):
        call_command("drain", heartbeat_file=str(garbled))
    with pytest.raises(CommandError, match="name the cluster"):
        call_command("drain", heartbeat_file="")
    with pytest.raises(CommandError, match="positive"):
        call_command("drain", pid=os.getpid(), timeout=0)


def _sleeper(killed: bool):
    """A process sleeping on a stop event, as a sentinel sleeps between its
    rounds; SIGKILLed in its sleep when `killed`, as a signal to the whole
    process group kills a sentinel."""
    event = get_mp_context().Event()
    sleeper = get_mp_context().Process(target=event.wait, daemon=True)
    sleeper.start()
    deadline = time.monotonic() + 10
    while event._cond._sleeping_count.get_value() < 1:
        assert time.monotonic() < deadline, "the sleeper never slept on the event"
        time.sleep(0.01)
    if killed:
        os.kill(sleeper.pid, signal.SIGKILL)
        sleeper.join()
    return event, sleeper


def test_a_stop_event_whose_sleeper_was_killed_is_set_without_hanging_the_cluster():
    """qcluster's stop asks each sentinel it saw alive to stop by setting its
    event; a sentinel killed in its sleep since would make that set wait for
    ever (the cluster then hung until its stopper's SIGKILL)."""
    event, _ = _sleeper(killed=True)
    plain = threading.Thread(target=event.set, daemon=True)
    plain.start()
    plain.join(1.0)
    assert plain.is_alive(), "a plain set returned: the hang this guards against did not happen"

    event, _ = _sleeper(killed=True)
    assert set_event(event, timeout=0.5) is False  # it gave up, and the stop goes on

    event, sleeper = _sleeper(killed=False)
    assert set_event(event) is True
    sleeper.join(10)
    assert sleeper.exitcode == 0  # a live sentinel is woken and told
