"""(j) Archive at scale (docs/explanation/operations-at-scale.md#operations-at-scale): `--archive-workflows` (default
100,000) finished-looking workflows are seeded with valid audit chains
(workflows.ops.seed), then archived by `workflows.audit.archive.write`, as
`manage.py archive` does, while a cluster runs a burst of live `noop`
plans. Reported: the archive's time, the peak RSS of this process while it
ran (sampled from /proc), the size of the files, how many steps the
workers completed while it ran (not blocked), and whether every live plan
still completed (no lost work: none of them archived unfinished). Then
`verify_archive`'s time on the result."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

from django.db.models import Count
from django.utils import timezone

from workflows.audit import archive, archived
from workflows.models import ArchivedWorkflow, Attempt, Workflow
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import Fleet
from workflows.ops.seed import Seeder
from workflows.states import WorkflowStatus

# Live plans run meanwhile: 400 at 100k, fewer for a small run.
LIVE_PLANS = 400
LIVE_STEPS = 5
# Old enough to be archived: every seeded plan; never a live one.
OLDER_THAN = timedelta(minutes=2)
MIB = 1024 * 1024


class PeakRss(threading.Thread):
    """The largest RSS of this process, read from /proc a few times a second."""

    def __init__(self, interval: float = 0.1):
        super().__init__(name="bench-archive-rss", daemon=True)
        self.interval, self.peak, self.stopped = interval, 0, threading.Event()
        self.start_rss = rss()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, rss())
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        self.peak = max(self.peak, rss())


def rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class ArchivePart:
    """Part (j), run by the Bench with its personas, fleet and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        count = self.o.archive_workflows
        self.bench.log(f"    seeding {count:,} workflows")
        seeded = time.monotonic()
        Seeder(count, count * 10, 5000, lambda text: self.bench.log(f"    {text}")).run()
        seed_seconds = time.monotonic() - seeded
        directory = self.bench.workdir / f"archive-{self.bench.tag}"
        with Fleet(self.bench.workdir, self.bench.cluster_env) as fleet:
            cluster = fleet.start("archive")
            plans = max(20, min(LIVE_PLANS, count // 250))
            live = self.bench.submit(plans, LIVE_STEPS, "archive")
            self.bench.approve_all(live)
            sampler = PeakRss()
            sampler.start()
            began, began_at = time.monotonic(), timezone.now()
            try:
                done = archive.write(
                    directory, older_than=OLDER_THAN, batch=1000, by="bench", progress=lambda text: None
                )
            finally:
                sampler.stop()
            seconds = time.monotonic() - began
            ended_at = timezone.now()
            during = Attempt.objects.filter(finished_at__gte=began_at, finished_at__lte=ended_at).count()
            self.bench.wait_steps(live, plans * LIVE_STEPS, [cluster], timeout=600)
        statuses = dict(Workflow.objects.filter(pk__in=live).values_list("status").annotate(n=Count("id")))
        archived_live = ArchivedWorkflow.objects.filter(workflow_id__in=live).count()
        if archived_live:
            raise BenchError(f"{archived_live} live plan(s) were archived")
        verifying = time.monotonic()
        verified = archived.verify(directory)
        if not verified.ok:
            raise BenchError(f"the archive does not verify: {verified.problems[:3]}")
        files = sum(path.stat().st_size for path in directory.iterdir())
        return {
            "seeded": count,
            "seed_s": round(seed_seconds, 1),
            "archived": done.workflows,
            "deleted": done.deleted,
            "kept": len(done.kept),
            "rows": sum(done.counts.values()),
            "seconds": round(seconds, 1),
            "workflows_per_s": round(done.deleted / seconds, 1) if seconds else None,
            "peak_rss_mib": round(sampler.peak / MIB, 1),
            "rss_growth_mib": round((sampler.peak - sampler.start_rss) / MIB, 1),
            "files_mib": round(files / MIB, 1),
            "live_plans": plans,
            "live_complete": statuses.get(WorkflowStatus.COMPLETE, 0),
            "steps_done_during_archive": during,
            "verify_s": round(time.monotonic() - verifying, 1),
        }
