"""Real workers killed at a failpoint and started again."""

import os
import time

CRASH_ENV = {
    "STEP_LEASE_SECONDS": "3",
    "RETRY_BASE_SECONDS": "0.05",
    "RETRY_CAP_SECONDS": "0.2",
    "ACTION_TIMEOUT_SECONDS": "2",
    "RECONCILE_GRACE_SECONDS": "0.5",
}


def crash_at(start_worker, tmp_path, point, work=None, **env):
    """Run a worker with `point` enabled, prove it died exactly there (the
    failpoint's marker names the point, and the pid it names is gone), then
    kill what is left of its cluster and start a clean one with the same
    environment, failpoints aside.

    Between that death and the kill, the doomed cluster's own loop may sweep
    up what the dead worker held, and another of its workers carry it on
    (and the kill take that worker's unexported spans with it). `work`, when
    given, is called once the doomed cluster is up, to hand it the work it
    dies on; its loop, which swept as it started, then sweeps no more, so
    that only the clean cluster can recover what the dead worker held."""
    marker = tmp_path / "failpoints.log"
    doomed_env = {**CRASH_ENV, **env, **({"WORKER_TICK_SECONDS": "600"} if work else {})}
    worker = start_worker(name="doomed", FAILPOINTS=point, FAILPOINT_MARKER=str(marker), **doomed_env)
    if work:
        work()
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text().strip()):
        assert time.monotonic() < deadline, f"failpoint {point} never fired:\n{worker.log()}"
        time.sleep(0.05)
    pid, label = marker.read_text().split()[:2]
    assert label == point
    while alive(int(pid)):
        assert time.monotonic() < deadline, f"process {pid} survived its failpoint"
        time.sleep(0.05)
    worker.kill()
    return start_worker(name="restarted", **CRASH_ENV, **env)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
