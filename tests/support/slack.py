"""The Slack stand-in (`manage.py slack_standin`, workflows.ops.slack_standin)
as a real process, for the tests of Slack approvals.

    @pytest.fixture(scope="session")
    def slack_standin(tmp_path_factory):
        yield from standin_session(tmp_path_factory)

    @pytest.fixture
    def slack(slack_standin, settings):
        return fresh_slack(slack_standin, settings)

    slack.calls()                       # every call received, in order
    slack.calls("chat.postMessage")     # only those
    slack.rate_limit(calls=2, retry_after=1)
    start_worker(**slack.env)           # a worker that talks to the stand-in

The stand-in accepts TOKEN and knows the channels of CHANNELS (team key →
channel id, as SLACK_CHANNELS says); `fresh_slack` points this process's
settings at it and clears the calls an earlier test left.
"""

from __future__ import annotations

import json
import time

import requests

from workflows.ops.processes import SlackStandinProcess

TOKEN = "xoxb-0000000000-standin-token"
SIGNING_SECRET = "standin-signing-secret-0123456789abcdef"
TEAM_ID = "T0STANDIN"
CHANNELS = {"default": "C0DEFAULT", "payments": "C0PAYMENTS", "ops": "C0OPS"}


class SlackStandin(SlackStandinProcess):
    @property
    def env(self) -> dict[str, str]:
        """The environment of a worker (or web process) that talks to this stand-in."""
        return {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_TEAM_ID": TEAM_ID,
            "SLACK_API_URL": self.api_url,
            "SLACK_CHANNELS": json.dumps(CHANNELS),
        }

    def response_url(self, name: str = "T0STANDIN/1/abc") -> str:
        """A response_url on the stand-in, as Slack gives one with an interaction."""
        return f"{self.url}/actions/{name}"

    def calls(self, method: str | None = None) -> list[dict]:
        calls = super().calls()
        return [call for call in calls if method is None or call["method"] == method]

    def wait_for(self, predicate, *, timeout: float = 60.0, what: str = "the expected Slack calls") -> list[dict]:
        """The calls, once `predicate(calls)` holds; fails after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            calls = self.calls()
            if predicate(calls):
                return calls
            if time.monotonic() > deadline:
                raise AssertionError(f"the stand-in did not receive {what} within {timeout} s; got {calls!r}")
            time.sleep(0.1)

    def channel_page(self, channel: str) -> str:
        response = requests.get(f"{self.url}/_standin/channel/{channel}", timeout=10)
        response.raise_for_status()
        return response.text


def standin_session(tmp_path_factory):
    """Yields a running stand-in for the session; stopped at the end."""
    standin = SlackStandin(tmp_path_factory.mktemp("slack") / "standin.log", token=TOKEN, channels=[*CHANNELS.values()])
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()


def fresh_slack(standin: SlackStandin, settings) -> SlackStandin:
    """The stand-in, running, with no calls, and this process's settings
    pointed at it."""
    if standin.process is None:
        standin.start()
    standin.rate_limit(calls=0, retry_after=1)
    standin.clear()
    settings.SLACK_BOT_TOKEN = TOKEN
    settings.SLACK_SIGNING_SECRET = SIGNING_SECRET
    settings.SLACK_TEAM_ID = TEAM_ID
    settings.SLACK_API_URL = standin.api_url
    settings.SLACK_CHANNELS = dict(CHANNELS)
    return standin
