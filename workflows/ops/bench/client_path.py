"""(r) Approval to COMPLETE as a client sees it (docs/performance.md#r-client-path).

One-step `noop` plans, one at a time, against a web process started as
production starts it (`gunicorn durableconsole.asgi -k asgi`) and one real
cluster. For each: the agent's `GET /api/v1/workflows/{id}/wait?until=terminal`
is parked first, as an agent waits; then the reviewer's `POST .../approve`
is sent over HTTP; the clock stops when the wait's answer, saying COMPLETE,
arrives at the client. Where the time goes, sample by sample, from the
records the processes wrote (one host, one clock), each from the moment the
approval was sent:

- `approve_answered`: the approval's request, its commit included;
- `requested`: the step's attempt `REQUESTED` (the wake-up, the claim, the
  recheck, the durable attempt before the effect);
- `complete`: the step `COMPLETE` (the effect, its outcome, verification);
- `client`: the waiter's answer at the client (the announcement of the
  move, the waiter's read and its response).

The baseline, timed the same way in the same run: a trivial authenticated
GET (`/api/v1/workflows?limit=1`) round trip; each figure is also given as
a ratio to its p50.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import requests

from workflows.models import Attempt, Step
from workflows.operations import tokens
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import Fleet, approval_body, spread
from workflows.ops.processes import WebServer
from workflows.states import StepStatus, WorkflowStatus

SERVER_NAME = "bench:client-web"
PHASES = ("approve_answered", "requested", "complete", "client")


class ClientPathPart:
    """Part (r), run by the Bench with its personas."""

    def __init__(self, bench):
        self.bench = bench

    def run(self) -> dict:
        samples = self.bench.o.latency_samples
        ids = self.bench.submit(samples, 1, "r")
        agent = requests.Session()
        agent.headers["Authorization"] = f"Bearer {tokens.issue(self.bench.agent)}"
        reviewer = requests.Session()
        reviewer.headers["Authorization"] = f"Bearer {tokens.issue(self.bench.reviewer)}"
        env = {**self.bench.cluster_env, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0"}
        phases: dict[str, list[float]] = {name: [] for name in PHASES}
        with (
            Fleet(self.bench.workdir, self.bench.cluster_env) as fleet,
            WebServer(SERVER_NAME, self.bench.workdir, env) as server,
        ):
            fleet.start("r-1")
            self.bench.wait_queue_idle()
            baseline = self._baseline(agent, server.url, samples)
            for workflow_id in ids:
                time.sleep(0.1)  # the workers go idle between samples
                for name, ms in self._sample(agent, reviewer, server.url, workflow_id).items():
                    phases[name].append(ms)
        result = {"samples": samples, "baseline_get_ms": spread(baseline)}
        for name in PHASES:
            result[f"{name}_ms"] = spread(phases[name])
            result[f"{name}_x_get"] = round(
                result[f"{name}_ms"]["p50"] / max(result["baseline_get_ms"]["p50"], 0.001), 1
            )
        self.bench.log(
            "    approval → COMPLETE at the client: p50 {p50} ms, p95 {p95} ms ({x}× a trivial GET); "
            "answered {a} ms, REQUESTED {r} ms, COMPLETE {c} ms (p50s)".format(
                p50=result["client_ms"]["p50"],
                p95=result["client_ms"]["p95"],
                x=result["client_x_get"],
                a=result["approve_answered_ms"]["p50"],
                r=result["requested_ms"]["p50"],
                c=result["complete_ms"]["p50"],
            )
        )
        return result

    @staticmethod
    def _baseline(agent: requests.Session, url: str, samples: int) -> list[float]:
        timed = []
        for _ in range(samples):
            began = time.perf_counter()
            answer = agent.get(f"{url}/api/v1/workflows?limit=1", timeout=30)
            timed.append((time.perf_counter() - began) * 1000)
            if answer.status_code != 200:
                raise BenchError(f"the baseline GET answered {answer.status_code}: {answer.text[:200]}")
        return timed

    def _sample(self, agent, reviewer, url: str, workflow_id) -> dict[str, float]:
        waited: dict = {}

        def wait():
            answer = agent.get(f"{url}/api/v1/workflows/{workflow_id}/wait?until=terminal&timeout=30", timeout=40)
            waited["at"], waited["answer"] = time.time(), answer

        waiter = threading.Thread(target=wait, name="bench-waiter")
        waiter.start()
        time.sleep(0.05)  # parked before the approval, as an agent that waits
        body = approval_body(workflow_id)
        sent = time.time()
        answer = reviewer.post(f"{url}/api/v1/workflows/{workflow_id}/approve", json=body, timeout=30)
        answered = time.time()
        if answer.status_code != 200:
            raise BenchError(f"approve answered {answer.status_code}: {answer.text[:200]}")
        waiter.join(45)
        final = waited.get("answer")
        if final is None or final.status_code != 200 or final.json().get("status") != WorkflowStatus.COMPLETE:
            shown = final.text[:200] if final is not None else "no answer"
            raise BenchError(f"the wait for {workflow_id} did not answer COMPLETE: {shown}")
        step = Step.objects.get(workflow_id=workflow_id)
        if step.status != StepStatus.COMPLETE:
            raise BenchError(f"step of {workflow_id} is {step.status}")
        attempt = Attempt.objects.filter(step=step).order_by("number").first()
        return {
            "approve_answered": (answered - sent) * 1000,
            "requested": (_epoch(attempt.started_at) - sent) * 1000,
            "complete": (_epoch(step.updated_at) - sent) * 1000,
            "client": (waited["at"] - sent) * 1000,
        }


def _epoch(at: datetime) -> float:
    return at.astimezone(UTC).timestamp()
