"""Slack settings (workflows.chat, docs/guides/slack-admins.md#settings),
imported by durableconsole.settings. Slack is off while SLACK_BOT_TOKEN is
unset."""

import json
import re

from django.core.exceptions import ImproperlyConfigured

from workflows.env import describe, env_secret, env_str

SLACK_BOT_TOKEN = env_secret(
    "SLACK_BOT_TOKEN", help="The Slack app's bot token (`xoxb-…`); Slack approvals are off while it is unset."
)
SLACK_SIGNING_SECRET = env_secret(
    "SLACK_SIGNING_SECRET", help="The Slack app's signing secret, which verifies interaction requests."
)
SLACK_TEAM_ID = env_str(
    "SLACK_TEAM_ID", "", help="The one Slack workspace (team id, `T…`) whose interactions are accepted."
)
SLACK_API_URL = env_str(
    "SLACK_API_URL",
    "https://slack.com/api/",
    help="Base URL of Slack's Web API (tests point it at the local stand-in, `manage.py slack_standin`).",
)
if not SLACK_API_URL.endswith("/"):
    SLACK_API_URL += "/"


def _channels(name: str) -> dict[str, str]:
    """A JSON object of team keys to Slack channel ids; a bad value stops
    start-up (a typo would otherwise post nothing, silently)."""
    describe(name, "JSON object", "(unset)", "Team key → Slack channel id where that team's plans are posted.")
    raw = env_str(name, "") or ""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f'{name} must be a JSON object like {{"payments": "C0123ABCD"}}: {exc}') from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f'{name} must be a JSON object like {{"payments": "C0123ABCD"}}')
    for team, channel in value.items():
        if not isinstance(channel, str) or not re.fullmatch(r"[A-Z0-9]{2,32}", channel):
            raise ImproperlyConfigured(
                f"{name}: team {team!r} must map to a channel id like C0123ABCD; got {channel!r}"
            )
    return dict(value)


SLACK_CHANNELS = _channels("SLACK_CHANNELS")
SLACK_PREVIEWS = env_str(
    "SLACK_PREVIEWS",
    "summary",
    help="How much of each step's preview a Slack message shows: `summary` or `full` (the request).",
)
if SLACK_PREVIEWS not in ("summary", "full"):
    raise ImproperlyConfigured(f"SLACK_PREVIEWS must be summary or full; got {SLACK_PREVIEWS!r}")
