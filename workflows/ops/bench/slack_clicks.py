"""(n) Slack clicks: `CLICKS` one-step `noop` plans, each approved by a
click as Slack sends it (a `block_actions` payload, signed v0 with the
signing secret) posted to `/chat/slack/interactions/` on a web process
started as production starts it, and decided by a real cluster's worker,
which answers on the stand-in's response_url
(docs/explanation/chat-decisions.md#chat-decisions). The clock starts when
the click is sent and stops when the plan leaves PLANNED (the status the
decision's transaction wrote, polled in the database); the acknowledgement
Slack waits for is timed apart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from urllib.parse import urlencode

import requests
from django.test.utils import override_settings

from workflows.chat import buttons
from workflows.models import Workflow
from workflows.operations import chat_links
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import Fleet, spread
from workflows.ops.processes import SlackStandinProcess, WebServer
from workflows.states import WorkflowStatus

CLICKS = 30
TEAM, SLACK_USER, CHANNEL = "T0BENCH", "U0BENCH", "C0BENCH"
SERVER_NAME = "bench:slack-web"


def click_body(workflow_id, response_url: str) -> bytes:
    workflow = Workflow.objects.get(pk=workflow_id)
    value = buttons.plan_value(workflow, list(workflow.steps.all()))  # as the posted message carries it
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": SLACK_USER, "username": "bench"},
        "response_url": response_url,
        "actions": [{"action_id": "approve", "value": value, "type": "button"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(body: bytes, secret: str) -> dict[str, str]:
    """v0, as Slack signs: HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    timestamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


class SlackClicksPart:
    """Part (n), run by the Bench with its personas."""

    def __init__(self, bench):
        self.bench = bench

    def run(self) -> dict:
        secret = secrets.token_hex(16)
        token = f"xoxb-bench-{secrets.token_hex(8)}"
        standin = SlackStandinProcess(self.bench.workdir / "slack-standin.log", token=token, channels=[CHANNEL])
        standin.start()
        slack_env = {"SLACK_SIGNING_SECRET": secret, "SLACK_TEAM_ID": TEAM, "SLACK_API_URL": standin.api_url}
        env = {**self.bench.cluster_env, **slack_env}
        ids = self.bench.submit(CLICKS, 1, "n")
        with override_settings(SLACK_TEAM_ID=TEAM):
            chat_links.link_by_hand(self.bench.reviewer, SLACK_USER)
        approved_ms, ack_ms = [], []
        try:
            with (
                Fleet(self.bench.workdir, env) as fleet,
                WebServer(
                    SERVER_NAME, self.bench.workdir, {**env, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0"}
                ) as server,
            ):
                fleet.start("l-1")
                self.bench.wait_queue_idle()
                for n, workflow_id in enumerate(ids):
                    body = click_body(workflow_id, f"{standin.url}/actions/bench/{n}")
                    headers = signed_headers(body, secret)
                    began = time.perf_counter()
                    answer = requests.post(
                        f"{server.url}/chat/slack/interactions/", data=body, headers=headers, timeout=30
                    )
                    ack_ms.append((time.perf_counter() - began) * 1000)
                    if answer.status_code != 200:
                        raise BenchError(f"the click answered {answer.status_code}: {answer.text[:200]}")
                    self._until_decided(workflow_id)
                    approved_ms.append((time.perf_counter() - began) * 1000)
                answered = _answers(standin, CLICKS)
        finally:
            standin.stop()
        result = {"clicks": CLICKS, "click_to_approved_ms": spread(approved_ms), "acknowledged_ms": spread(ack_ms)}
        result["answered_on_response_url"] = answered
        self.bench.log(
            f"    click → APPROVED: p50 {result['click_to_approved_ms']['p50']} ms, "
            f"p95 {result['click_to_approved_ms']['p95']} ms; acknowledged p50 {result['acknowledged_ms']['p50']} ms"
        )
        return result

    @staticmethod
    def _until_decided(workflow_id, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while Workflow.objects.filter(pk=workflow_id, status=WorkflowStatus.PLANNED).exists():
            if time.monotonic() > deadline:
                raise BenchError(f"plan {workflow_id} was still PLANNED {timeout:.0f} s after its click")
            time.sleep(0.01)


def _answers(standin: SlackStandinProcess, expected: int, timeout: float = 10.0) -> int:
    """The answers posted on response_urls, once `expected` arrived (each
    is posted just after its decision commits) or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while True:
        answered = len([call for call in standin.calls() if call["method"] == "response_url"])
        if answered >= expected or time.monotonic() > deadline:
            return answered
        time.sleep(0.1)
