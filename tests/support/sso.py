"""Signing in through the real OpenID Connect provider process
(tests/support/oidc_provider.py): the maps from its groups to roles and
teams, and the code flow as the browser follows it."""

from urllib.parse import urlsplit

import requests

ROLE_MAP = {
    "reviewers": ["idp-reviewers"],
    "operators": ["idp-ops"],
    "auditors": ["idp-audit"],
    "payments-reviewers": ["idp-payments"],
}
TEAM_MAP = {"payments": ["idp-payments"], "default": ["idp-reviewers"]}


def start(client, **query):
    """The console's redirect to the provider, and the provider's answer."""
    begin = client.get("/oidc/authenticate/", query)
    assert begin.status_code == 302, begin.content
    answer = requests.get(begin["Location"], allow_redirects=False, timeout=5)
    assert answer.status_code == 302
    return begin["Location"], urlsplit(answer.headers["Location"])


def sign_in(client, **query):
    _, back = start(client, **query)
    assert back.path == "/oidc/callback/"
    return client.get(f"{back.path}?{back.query}")


def signed_in_user(client):
    return client.session.get("_auth_user_id")
