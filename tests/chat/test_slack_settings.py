"""Slack's settings fail loudly at start-up: a mistyped SLACK_CHANNELS or
SLACK_PREVIEWS would otherwise post nothing, or the wrong thing, silently."""

import pytest

from tests.support.processes import manage


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("SLACK_CHANNELS", "payments=C0123", "SLACK_CHANNELS must be a JSON object"),
        ("SLACK_CHANNELS", '["C0123"]', "SLACK_CHANNELS must be a JSON object"),
        ("SLACK_CHANNELS", '{"payments": "#payments"}', "team 'payments' must map to a channel id"),
        ("SLACK_PREVIEWS", "everything", "SLACK_PREVIEWS must be summary or full"),
    ],
)
def test_a_bad_slack_setting_stops_start_up(name, value, says):
    done = manage("check", **{name: value})
    assert done.returncode != 0
    assert says in done.stderr


def test_good_slack_settings_start(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("xoxb-from-a-file\n")
    done = manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SLACK_BOT_TOKEN, settings.SLACK_CHANNELS)",
        SLACK_BOT_TOKEN_FILE=str(token_file),
        SLACK_CHANNELS='{"payments": "C0123ABCD"}',
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "xoxb-from-a-file {'payments': 'C0123ABCD'}"
