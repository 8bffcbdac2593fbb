"""The chat wing's Slack: the stand-in process (tests/support/slack.py), one
per session, cleared and wired into the settings for each test."""

import pytest

from tests.support.slack import fresh_slack, standin_session


@pytest.fixture(scope="session")
def slack_standin(tmp_path_factory):
    yield from standin_session(tmp_path_factory)


@pytest.fixture
def slack(slack_standin, settings):
    return fresh_slack(slack_standin, settings)
