"""The Slack stand-in speaks Slack's shapes, as slack_sdk's own client sends
and reads them: what the console's tests rely on is pinned here."""

import pytest
import requests
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from tests.support.slack import CHANNELS, TOKEN

CHANNEL = CHANNELS["default"]


@pytest.fixture
def web(slack):
    return WebClient(token=TOKEN, base_url=slack.api_url)


def section(text):
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def test_post_message_answers_channel_ts_and_message(web, slack):
    answer = web.chat_postMessage(channel=CHANNEL, text="Plan awaiting review", blocks=[section("*Plan*")])
    assert answer["ok"] is True
    assert answer["channel"] == CHANNEL
    assert answer["message"]["ts"] == answer["ts"]
    assert answer["message"]["blocks"] == [section("*Plan*")]
    [call] = slack.calls()
    assert call["method"] == "chat.postMessage"
    assert call["path"] == "/api/chat.postMessage"
    assert call["body"]["blocks"] == [section("*Plan*")]


def test_update_replaces_the_message_it_names(web, slack):
    posted = web.chat_postMessage(channel=CHANNEL, text="first", blocks=[section("first")])
    updated = web.chat_update(channel=CHANNEL, ts=posted["ts"], text="second", blocks=[section("second")])
    assert (updated["ok"], updated["channel"], updated["ts"], updated["text"]) == (
        True,
        CHANNEL,
        posted["ts"],
        "second",
    )
    assert updated["message"]["blocks"] == [section("second")]
    assert [call["method"] for call in slack.calls()] == ["chat.postMessage", "chat.update"]
    assert "second" in slack.channel_page(CHANNEL)


def test_form_encoded_bodies_are_read_as_slack_reads_them(slack):
    answer = requests.post(
        f"{slack.api_url}chat.postMessage",
        data={"token": TOKEN, "channel": CHANNEL, "text": "hi", "blocks": '[{"type": "divider"}]'},
        timeout=10,
    ).json()
    assert answer["ok"] is True
    assert slack.calls()[0]["body"]["blocks"] == [{"type": "divider"}]


def test_a_wrong_token_is_invalid_auth(slack):
    with pytest.raises(SlackApiError) as raised:
        WebClient(token="xoxb-wrong", base_url=slack.api_url).chat_postMessage(channel=CHANNEL, text="hi")
    assert raised.value.response["error"] == "invalid_auth"


def test_unknown_channel_and_unknown_message(web):
    with pytest.raises(SlackApiError) as raised:
        web.chat_postMessage(channel="C0NOWHERE", text="hi")
    assert raised.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError) as raised:
        web.chat_update(channel=CHANNEL, ts="1.000001", text="hi")
    assert raised.value.response["error"] == "message_not_found"


def test_blocks_past_slacks_limits_are_invalid_blocks(web, slack):
    with pytest.raises(SlackApiError) as raised:
        web.chat_postMessage(channel=CHANNEL, text="many", blocks=[section("x")] * 51)
    assert raised.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as raised:
        web.chat_postMessage(channel=CHANNEL, text="long", blocks=[section("x" * 3001)])
    assert raised.value.response["error"] == "invalid_blocks"
    assert raised.value.response["errors"]
    web.chat_postMessage(channel=CHANNEL, text="at the limit", blocks=[section("x" * 3000)] * 50)


def test_rate_limit_answers_429_with_retry_after_then_serves_again(web, slack):
    slack.rate_limit(calls=2, retry_after=7)
    for _ in range(2):
        with pytest.raises(SlackApiError) as raised:
            web.chat_postMessage(channel=CHANNEL, text="hi")
        assert raised.value.response.status_code == 429
        assert raised.value.response.headers["Retry-After"] == "7"
        assert raised.value.response["error"] == "ratelimited"
    assert web.chat_postMessage(channel=CHANNEL, text="hi")["ok"] is True
    assert [call["status"] for call in slack.calls()] == [429, 429, 200]


def test_response_url_records_the_body_and_answers_ok(slack):
    response = requests.post(slack.response_url(), json={"replace_original": True, "text": "Approved"}, timeout=10)
    assert (response.status_code, response.text) == (200, "ok")
    [call] = slack.calls()
    assert call["method"] == "response_url"
    assert call["body"] == {"replace_original": True, "text": "Approved"}


def test_the_channel_page_escapes_what_messages_say(web, slack):
    web.chat_postMessage(channel=CHANNEL, text="x", blocks=[section("<script>alert(1)</script>")])
    page = slack.channel_page(CHANNEL)
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
