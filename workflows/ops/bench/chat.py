"""(m) Chat: how soon a plan submitted through the API reaches Slack
(the stand-in, `manage.py slack_standin`) as `chat.postMessage`, while the
worker has a backlog of `--chat-backlog` due steps (default 10,000) to run.

The backlog is queued first: plans of `noop` steps, submitted and approved
with Slack off (they are not posted), their previews' tasks taken off the
queue as (k) does: a backlog of steps is one of plans reviewed earlier. Then one cluster starts, pointed at
the stand-in, and `--chat-samples` plans are submitted through the JSON API
one after another; each one's delay runs from its submission to the
stand-in's record of its `chat.postMessage` (one host, one clock). Beside
each delay is the number of the backlog's steps still due when its message
arrived: a message that waits for the backlog shows a small number there.
"""

from __future__ import annotations

import bisect
import time

from django.conf import settings
from django.test import Client
from django.test.utils import override_settings

from workflows import queue
from workflows.models import Step
from workflows.operations import plans, tokens
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import Fleet, spread
from workflows.ops.processes import SlackStandinProcess
from workflows.states import StepStatus

TOKEN = "xoxb-bench-standin"
CHANNEL = "C0BENCH"
# Submissions one after another at this pace: what is measured is how soon
# each reaches Slack, not how fast the API takes a burst.
SUBMISSIONS_PER_S = 2
WAIT_SECONDS = 600
STEPS_PER_PLAN = 5


class ChatPart:
    """Part (m), run by the Bench with its personas and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        backlog_count = self.o.chat_backlog
        with override_settings(SLACK_BOT_TOKEN=""):
            backlog = self.bench.submit(-(-backlog_count // STEPS_PER_PLAN), STEPS_PER_PLAN, "k-backlog")
            # A backlog of steps is one of plans reviewed earlier: their own
            # previews' tasks are not left queued ahead of the samples (as in (k)).
            for broker in queue.brokers().values():
                broker.purge_queue()
            self.bench.approve_all(backlog)
        due = Step.objects.filter(workflow_id__in=backlog, status=StepStatus.PENDING)
        queued = due.count()
        standin = SlackStandinProcess(self.bench.workdir / "slack-standin.log", token=TOKEN, channels=[CHANNEL])
        standin.start()
        team = plans.submitting_team(self.bench.agent).name
        slack = {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_API_URL": standin.api_url,
            "SLACK_CHANNELS": f'{{"{team}": "{CHANNEL}"}}',
        }
        client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(self.bench.agent, name='bench chat')}")
        submitted: dict[str, float] = {}
        samples: list[tuple[float, int]] = []
        try:
            with (
                Fleet(self.bench.workdir, {**self.bench.cluster_env, **slack}) as fleet,
                override_settings(
                    SLACK_BOT_TOKEN=TOKEN,
                    SLACK_API_URL=standin.api_url,
                    SLACK_CHANNELS={team: CHANNEL},
                    ALLOWED_HOSTS=["testserver"],
                    SECURE_SSL_REDIRECT=False,
                ),
            ):
                fleet.start("k-1")
                for n in range(self.o.chat_samples):
                    name = f"bench chat {self.bench.tag} {n}"
                    samples.append((time.time(), due.count()))
                    submitted[name] = time.time()
                    answer = client.post(
                        "/api/v1/workflows",
                        {
                            "name": name,
                            "submission_key": f"bench-{self.bench.tag}-k-{n}",
                            "steps": [{"key": "s0", "action": "noop", "args": {}}],
                        },
                        content_type="application/json",
                    )
                    if answer.status_code != 201:
                        raise BenchError(f"submission answered {answer.status_code}: {answer.content[:200]!r}")
                    time.sleep(1 / SUBMISSIONS_PER_S)
                arrived = self._arrivals(standin, submitted, due, samples)
        finally:
            standin.stop()
        delays = [arrived[name] - at for name, at in submitted.items() if name in arrived]
        if not delays:
            raise BenchError("no message reached the stand-in")
        times = [at for at, _ in samples]
        due_at = {name: samples[max(0, bisect.bisect_right(times, arrived[name]) - 1)][1] for name in arrived}
        still_due = list(due_at.values())
        # The messages that arrived while the backlog still had steps due:
        # those are the ones a shared queue would have held back.
        under = [(arrived[name] - submitted[name]) * 1000 for name in arrived if due_at[name] > 0]
        return {
            "backlog_steps_queued": queued,
            "submissions": len(submitted),
            "posted": len(delays),
            "not_posted_within_s": {"seconds": WAIT_SECONDS, "count": len(submitted) - len(delays)},
            "submission_to_post_ms": spread([d * 1000 for d in delays]),
            "backlog_due_at_arrival": spread([float(n) for n in still_due], 0),
            "submission_to_post_ms_while_steps_due": spread(under) if under else {"n": 0},
            "workers": self.bench.workers,
            "slack_previews": settings.SLACK_PREVIEWS,
        }

    def _arrivals(self, standin, submitted: dict, due, samples: list) -> dict[str, float]:
        """Each plan's first chat.postMessage at the stand-in, by plan name;
        samples the backlog still due meanwhile, once a second."""
        deadline = time.monotonic() + WAIT_SECONDS
        arrived: dict[str, float] = {}
        while len(arrived) < len(submitted) and time.monotonic() < deadline:
            for call in standin.calls():
                if call["method"] != "chat.postMessage" or call["status"] != 200:
                    continue
                text = call["body"].get("text", "")
                for name in submitted:
                    if name not in arrived and text.endswith(name):
                        arrived[name] = call["at"]
            samples.append((time.time(), due.count()))
            time.sleep(1)
        return arrived
