"""What the parts that start clusters share: the clusters they started, and percentiles."""

from __future__ import annotations

import math
from pathlib import Path

from workflows.operations.deciding import Seen
from workflows.ops.processes import Cluster


def spread(values: list[float], digits: int = 1) -> dict:
    """n, p50, p95 (nearest rank) and max."""
    ordered = sorted(values)

    def rank(p):
        return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], digits)

    return {"n": len(ordered), "p50": rank(50), "p95": rank(95), "max": round(ordered[-1], digits)}


class Fleet:
    """The clusters one part started; every one is stopped on exit, whatever happened."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir, self.env = workdir, env
        self.started: list[Cluster] = []

    def start(self, name: str, **env) -> Cluster:
        cluster = Cluster(name, self.workdir, {**self.env, "PGAPPNAME": f"bench:{name}", **env})
        self.started.append(cluster)
        return cluster.start()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc_info) -> None:
        for cluster in self.started:
            cluster.stop(timeout=10)


def approval_body(workflow_id) -> dict:
    """An approval's request body naming what a reviewer reads before
    deciding (the plan's revision, hash and previews), read now."""
    seen = Seen.current(workflow_id)
    return {
        "comment": "bench",
        "revision": seen.revision,
        "plan_hash": seen.plan_hash,
        "preview_digests": seen.preview_digests,
    }
