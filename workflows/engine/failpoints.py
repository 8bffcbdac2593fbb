"""Named crash points at every checkpoint boundary.

Inert unless listed in the FAILPOINTS environment variable (comma-separated
names, optionally scoped: `after_perform` fires anywhere, `replay:after_perform`
only while a replayed step runs, `compensation:after_perform` only inside a
compensation). An enabled point kills its own process with SIGKILL, exactly
as the OOM killer or a power cut would, so crash tests exercise real recovery.

With FAILPOINT_MARKER set, each point fires once: it appends `pid point` to
that file (the test's proof that the process died right there) and a
restarted worker then runs past it.
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
SCOPES = ("replay", "compensation")
# Inside a bulk job's batch (workflows.operations.bulk), before it commits:
# not a step's checkpoint, so not in ALL.
IN_BULK_BATCH = "in_bulk_batch"


def enabled() -> set[str]:
    return {name.strip() for name in os.environ.get("FAILPOINTS", "").split(",") if name.strip()}


def hit(name: str, *, scope: str = "") -> None:
    """Die here if this point (or `scope:point`) is enabled."""
    points = enabled()
    if not points:
        return
    label = f"{scope}:{name}" if scope else name
    if name not in points and label not in points:
        return
    marker = os.environ.get("FAILPOINT_MARKER")
    if marker:
        try:
            with open(marker) as fh:
                if any(line.split()[1:] == [label] for line in fh):
                    return
        except FileNotFoundError:
            pass
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()} {label}\n")
            fh.flush()
            os.fsync(fh.fileno())
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def scope_of(step) -> str:
    """The scope a step's points fire in: its compensation, its replay, or none."""
    return "compensation" if step.lane else ("replay" if step.retry_base else "")


def hit_each(point: str, steps) -> None:
    if enabled():
        for step in steps:
            hit(point, scope=scope_of(step))
