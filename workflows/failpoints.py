"""Named crash points at every checkpoint boundary.

Inert unless listed in the FAILPOINTS environment variable (comma-separated
names); an enabled point kills its own process with SIGKILL, exactly as a
power cut or the OOM killer would, so crash tests exercise real recovery.
"""

import os
import signal
import sys

AFTER_CLAIM = "after_claim"
AFTER_REQUESTED = "after_requested"
AFTER_PERFORM = "after_perform"
AFTER_RECORD = "after_record"
AFTER_VERIFY = "after_verify"
ALL = (AFTER_CLAIM, AFTER_REQUESTED, AFTER_PERFORM, AFTER_RECORD, AFTER_VERIFY)


def enabled() -> set[str]:
    return {name.strip() for name in os.environ.get("FAILPOINTS", "").split(",") if name.strip()}


def hit(name: str, *, scope: str = "") -> None:
    """Die here if this point (optionally `scope:name`) is enabled."""
    points = enabled()
    if not points:
        return
    if name in points or (scope and f"{scope}:{name}" in points):
        marker = os.environ.get("FAILPOINT_MARKER")
        if marker:
            # Proof for the test that the process died at this very point.
            with open(marker, "a") as fh:
                fh.write(f"{os.getpid()} {scope + ':' if scope else ''}{name}\n")
                fh.flush()
                os.fsync(fh.fileno())
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
