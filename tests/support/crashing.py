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


def crash_at(start_worker, tmp_path, point, **env):
    """Run a worker with `point` enabled, prove it died exactly there (the
    failpoint's marker names the point, and the pid it names is gone), then
    kill what is left of its cluster and start a clean one with the same
    environment, failpoints aside."""
    marker = tmp_path / "failpoints.log"
    worker = start_worker(name="doomed", FAILPOINTS=point, FAILPOINT_MARKER=str(marker), **CRASH_ENV, **env)
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
