"""(k) Lanes (docs/explanation/architecture.md#queue-lanes): how soon a
reviewer's notice and a plan's previews are delivered while a backlog of
`--lanes-steps` due steps (default 10,000) occupies every step worker,
against the same with no backlog.

One cluster as production starts it (`qcluster`: `Q_WORKERS` step workers,
`Q_MESSAGE_WORKERS` on the messages lane), its REVIEW_WEBHOOK_URL pointed
at a receiver in this process. A sample is a one-step plan submitted as an
agent submits it: its notice's delay is from the submission's commit to
the notice arriving at the receiver, its previews' from the commit to the
step's `preview_at`. Samples are submitted `SAMPLE_GAP` apart, not one
after another's delivery, so that many are taken before the backlog runs
out. Idle: `--lanes-samples` samples with nothing else to do. Under the
backlog: `noop` plans approved while no worker ran (their own notices and
previews taken off the messages lane first: a backlog of steps is one of
plans reviewed earlier), then the cluster started and the same samples
taken while the steps run; each records the backlog's steps still
unfinished when its notice arrived. Reported: p50 / p95 / max of each
delay, idle and under the backlog, and their ratio. Then the same under a
second backlog with each sample's tasks queued on the steps lane (this
process's `queue.LANES` emptied), as when every task shared one queue. A
notice and a plan's previews are due rows, which the worker loop's sweep
wakes the messages lane for whatever lane their wake-up took: that
comparison now shows the sweep, no longer what one queue would cost them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.db import connection, transaction

from workflows import queue
from workflows.models import Step
from workflows.operations import plans
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import Fleet, spread
from workflows.states import StepStatus

# A sample waits at most this long for its notice and previews.
SAMPLE_TIMEOUT = 60.0
# Between samples: a few a second, so that one sample's tasks seldom wait
# behind the previous one's on the messages lane.
SAMPLE_GAP = 0.25


class Notices:
    """A receiver of REVIEW_WEBHOOK_URL's posts in this process: when each
    plan's notice arrived, and how many steps of the backlog were then
    unfinished (counted in the receiver's thread as the notice arrives)."""

    def __init__(self, part):
        self.arrived: dict[str, tuple[float, int]] = {}
        self.backlog: list = []
        notices = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    left = part.unfinished(notices.backlog) if notices.backlog else 0
                finally:
                    connection.close()  # this thread's own
                notices.arrived.setdefault(json.loads(body)["workflow_id"], (at, left))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/notice"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="bench-notices").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class LanesPart:
    """Part (k), run by the Bench with its personas and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o
        self.submitted = self.backlogs = 0

    def run(self) -> dict:
        notices = Notices(self)
        try:
            env = {**self.bench.cluster_env, "REVIEW_WEBHOOK_URL": notices.url}
            with Fleet(self.bench.workdir, env) as fleet:
                fleet.start("lanes-idle")
                idle = self.samples(notices, lambda: True)
            busy = self.under_backlog(notices, env, "lanes-backlog")
            # The same, each sample's tasks queued on the steps lane, as when every task shared one queue.
            saved, queue.LANES = queue.LANES, {}
            try:
                shared = self.under_backlog(notices, env, "lanes-one-queue")
            finally:
                queue.LANES = saved
        finally:
            notices.close()
        if len(busy) < 2 or not shared:
            raise BenchError(
                f"a backlog drained after {min(len(busy), len(shared))} sample(s): take more --lanes-steps"
            )
        result = {"steps": self.o.lanes_steps, "idle": _summary(idle), "backlog": _summary(busy)}
        result["backlog"]["unfinished_steps_at_notice"] = spread([s["unfinished"] for s in busy], 0)
        result["one_queue"] = _summary(shared)
        result["one_queue"]["unfinished_steps_at_notice"] = spread([s["unfinished"] for s in shared], 0)
        for percentile in ("p50", "p95"):
            result[f"ratio_{percentile}"] = {
                kind: _ratio(result["backlog"][kind][percentile], result["idle"][kind][percentile])
                for kind in ("notice", "previews")
            }
        self.bench.log(
            f"    notice ms p50/p95: idle {result['idle']['notice']['p50']}/{result['idle']['notice']['p95']}, "
            f"under {self.o.lanes_steps:,} steps {result['backlog']['notice']['p50']}/"
            f"{result['backlog']['notice']['p95']} (ratio {result['ratio_p50']['notice']}/"
            f"{result['ratio_p95']['notice']}); {len(busy)} samples, "
            f"{result['backlog']['unfinished_steps_at_notice']['p50']:,.0f} steps unfinished at the median notice; "
            f"on one queue p50/p95 {result['one_queue']['notice']['p50']}/{result['one_queue']['notice']['p95']}, "
            f"{result['one_queue']['unfinished_steps_at_notice']['p50']:,.0f} unfinished"
        )
        return result

    def under_backlog(self, notices: Notices, env: dict, name: str) -> list[dict]:
        """Samples taken while a cluster runs a fresh backlog of due steps."""
        backlog = self.backlog()
        notices.backlog = backlog
        with Fleet(self.bench.workdir, env) as fleet:
            cluster = fleet.start(name)
            taken = self.samples(notices, lambda: cluster.alive and self.unfinished(backlog) > 0)
            self.bench.wait_steps(backlog, self.o.lanes_steps, [cluster], timeout=max(120.0, self.o.lanes_steps))
            self.bench.wait_queue_idle()
        return taken

    def samples(self, notices: Notices, going) -> list[dict]:
        """Up to `--lanes-samples` plans submitted `SAMPLE_GAP` apart while
        `going()`; each one's notice's and previews' delays (ms) from its
        commit, once all have arrived."""
        committed = {}
        while len(committed) < self.o.lanes_samples and going():
            self.submitted += 1
            body = {
                "name": f"bench lanes {self.submitted}",
                "submission_key": f"bench-{self.bench.tag}-lanes-{self.submitted}",
                "steps": [{"key": "open", "action": "ticket.create", "args": {"title": f"lanes {self.submitted}"}}],
            }
            with transaction.atomic():
                workflow = plans.submit(self.bench.agent, body).workflow
            committed[str(workflow.pk)] = time.time()
            time.sleep(SAMPLE_GAP)
        deadline = time.monotonic() + SAMPLE_TIMEOUT
        previewed = {}
        while len(previewed) < len(committed) or not set(committed) <= set(notices.arrived):
            if time.monotonic() > deadline:
                raise BenchError(
                    f"notices or previews of {len(committed)} plans not all in after {SAMPLE_TIMEOUT:.0f} s"
                )
            time.sleep(0.05)
            previewed = dict(
                Step.objects.filter(workflow_id__in=list(committed), preview_at__isnull=False).values_list(
                    "workflow_id", "preview_at"
                )
            )
        return [
            {
                "notice": (notices.arrived[key][0] - at) * 1000,
                "previews": max(0.0, (previewed[uuid.UUID(key)].timestamp() - at) * 1000),
                "unfinished": notices.arrived[key][1],
            }
            for key, at in committed.items()
        ]

    def backlog(self) -> list:
        """`noop` plans approved while no worker runs; their notices and
        previews already taken off the queue (whichever lane they took)."""
        per = self.o.steps_per_workflow
        self.backlogs += 1
        ids = self.bench.submit(-(-self.o.lanes_steps // per), per, f"k{self.backlogs}")
        for broker in queue.brokers().values():
            broker.purge_queue()
        self.bench.approve_all(ids)
        self.o.lanes_steps = len(ids) * per
        return ids

    def unfinished(self, ids: list) -> int:
        return Step.objects.filter(workflow_id__in=ids).exclude(status=StepStatus.COMPLETE).count()


def _summary(samples: list[dict]) -> dict:
    return {kind: spread([sample[kind] for sample in samples], 1) for kind in ("notice", "previews")}


def _ratio(under: float, idle: float) -> float | None:
    return round(under / idle, 2) if idle else None
