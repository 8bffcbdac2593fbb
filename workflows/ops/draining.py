"""`manage.py drain`: stop one cluster on this host without cutting an effect
short. The cluster's main process is sent SIGTERM; its workers claim nothing
more (workflows.engine.draining), finish the effects they have in flight and
record each outcome under its own fence; then the cluster exits. The work it
did not claim stays due for the other clusters, or for this one once it
starts again. An upgrade drains every cluster this way, one host at a time."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from workflows.engine import leases
from workflows.models import Attempt
from workflows.ops import processes
from workflows.states import AttemptStatus


class DrainError(Exception):
    pass


def cluster_pid(heartbeat_file: str | None) -> int:
    """The main process of the cluster whose liveness file this is (its loop
    writes "<pid> <time>" there: WORKER_HEARTBEAT_FILE)."""
    if not heartbeat_file:
        raise DrainError("name the cluster: --pid PID, or --heartbeat-file PATH (or set WORKER_HEARTBEAT_FILE)")
    try:
        first = Path(heartbeat_file).read_text().split()[0]
    except (OSError, IndexError):
        raise DrainError(f"cannot read a cluster's pid from {heartbeat_file}") from None
    if not first.isdigit():
        raise DrainError(f"{heartbeat_file} does not start with a pid")
    return int(first)


def is_cluster(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"qcluster" in command


def in_flight(worker_pids: set[int]) -> int:
    """Effects sent by these worker processes with no outcome yet."""
    owners = [f"{leases.LOCAL_PREFIX}:{pid}" for pid in worker_pids]
    return Attempt.objects.filter(status=AttemptStatus.REQUESTED, worker__in=owners).count() if owners else 0


def drain(pid: int, timeout: float, report: Callable[[str], None]) -> float:
    """Ask the cluster to stop and wait until it has; seconds it took."""
    if not processes.alive(pid):
        raise DrainError(f"no process {pid} on this host")
    if not is_cluster(pid):
        raise DrainError(f"process {pid} is not a qcluster")
    workers = processes.descendants(pid)
    began = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    report(f"cluster {pid}: claiming stopped; {in_flight(workers)} effect(s) in flight")
    last_said = began
    while processes.alive(pid):
        now = time.monotonic()
        if now - began > timeout:
            raise DrainError(
                f"cluster {pid} still running after {timeout:.0f} s with {in_flight(workers)} effect(s) "
                "in flight; if it is killed, their leases expire and recovery reconciles them"
            )
        if now - last_said >= 5:
            report(f"cluster {pid}: {in_flight(workers)} effect(s) in flight")
            last_said = now
        time.sleep(0.2)
    left = in_flight(workers)
    if left:  # the cluster died rather than finished; recovery takes these over
        raise DrainError(f"cluster {pid} exited with {left} effect(s) still REQUESTED; recovery reconciles them")
    return time.monotonic() - began
