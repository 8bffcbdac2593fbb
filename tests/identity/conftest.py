"""The identity wing's provider: the real OpenID Connect provider process
(tests/support/oidc_provider.py), one per module, set back to a good
provider and mapped into the console's settings for each test."""

import pytest

from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, BadTokenProvider
from tests.support.sso import ROLE_MAP, TEAM_MAP
from workflows.web import sso


@pytest.fixture(scope="module")
def provider():
    with BadTokenProvider() as running:
        yield running


@pytest.fixture
def sso_on(settings, provider, db):
    provider.control(
        mode="good",
        sub="alice",
        groups=["idp-reviewers"],
        auth_time=True,
        clear_log=True,
        sid="provider-session-1",
        email=None,
        email_verified=None,
    )
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_ROLE_MAP = ROLE_MAP
    settings.OIDC_TEAM_MAP = TEAM_MAP
    sso.forget_provider()
    yield provider
    sso.forget_provider()
