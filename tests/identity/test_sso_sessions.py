"""Sessions and tokens follow the person (docs/explanation/decisions.md#bound-decisions), against the real
provider process (tests/support/oidc_provider.py): the provider's back-channel
logout and a silent renewal it refuses end the person's sessions and stop
their agents' tokens until re-enabled; sign-out ends the provider's session
too; no session outlives SESSION_MAX_AGE; `next` stays on this site; no
cross-site request signs anyone out."""

import base64
import io
import json
import time
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import requests
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.core.management import call_command

from tests.support.api import ApiClient
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from tests.support.sso import sign_in, signed_in_user, start
from workflows.models import ApiToken, AuditEvent
from workflows.operations import persons, plans
from workflows.web.auth import SESSION_STARTED

BACKCHANNEL = "/oidc/backchannel-logout/"
EVIL = ["//evil.example/", "/\\evil.example", "https:evil.example", "https://evil.example/x", "/\t/evil.example"]


@pytest.fixture
def alices_agent(sso_on, people):
    """Alice signed in (so her account exists), owning an agent with a token."""
    client = Client()
    sign_in(client)
    alice = User.objects.get(username="alice")
    persons.set_owner(people["agent"], alice, by=None)
    return {"client": client, "alice": alice, "agent": ApiClient(people["agent"])}


def renew(client, **session):
    """Make the SSO session due for renewal and carry it through the provider."""
    stored = client.session
    stored["oidc_id_token_expiration"] = time.time() - 1
    stored.update(session)
    stored.save()
    to_provider = client.get("/workflows/")
    assert to_provider.status_code == 302 and "prompt=none" in to_provider["Location"]
    answer = requests.get(to_provider["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(answer.headers["Location"])
    return client.get(f"{back.path}?{back.query}")


def logout(token: str):
    return Client().post(BACKCHANNEL, {"logout_token": token})


# --- back-channel logout -------------------------------------------------------------


def test_backchannel_logout_ends_the_subjects_sessions_and_stops_their_agents(alices_agent, sso_on, people):
    second = Client()
    sign_in(second)
    bystander = Client()
    assert bystander.login(username="reviewer", password=PASSWORD)
    assert alices_agent["agent"].get("/workflows").status_code == 200

    answer = logout(sso_on.logout_token(sub="alice"))
    assert answer.status_code == 200 and answer.json()["sessions_ended"] == 2
    assert answer["Cache-Control"] == "no-store"
    for client in (alices_agent["client"], second):
        assert client.get("/").status_code == 302 and signed_in_user(client) is None
    assert bystander.get("/").status_code == 200
    assert alices_agent["agent"].get("/workflows").status_code == 401
    assert ApiToken.objects.get(user=people["agent"]).suspended_at is not None
    event = AuditEvent.objects.get(verb="user.signed_out_at_provider")
    assert (event.actor, event.data["via"], event.data["tokens_suspended"]) == ("alice", "backchannel-logout", 1)

    # Signing in again does not restart the agent: an operator does.
    sign_in(Client())
    assert alices_agent["agent"].get("/workflows").status_code == 401
    out = io.StringIO()
    call_command("agent", "enable", "agent", stdout=out)
    assert "1 token(s) of agent re-enabled" in out.getvalue()
    assert alices_agent["agent"].get("/workflows").status_code == 200
    assert AuditEvent.objects.get(verb="agent.enabled").data == {"agent": "agent", "tokens": 1}


def test_backchannel_logout_by_sid_ends_only_that_provider_session(sso_on):
    first = Client()
    sign_in(first)
    sso_on.control(sid="provider-session-2")
    second = Client()
    sign_in(second)
    assert second.session["durableconsole.sso"]["sid"] == "provider-session-2"

    answer = logout(sso_on.logout_token(sid="provider-session-1"))
    assert answer.status_code == 200 and answer.json()["sessions_ended"] == 1
    assert signed_in_user(first) is None and first.get("/").status_code == 302
    assert second.get("/").status_code == 200


def test_backchannel_logout_for_someone_unknown_changes_nothing(sso_on):
    client = Client()
    sign_in(client)
    answer = logout(sso_on.logout_token(sub="nobody-here"))
    assert answer.status_code == 200 and answer.json()["sessions_ended"] == 0
    assert client.get("/").status_code == 200
    assert not AuditEvent.objects.filter(verb="user.signed_out_at_provider").exists()


def _unsigned(claims: dict) -> str:
    part = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{part({'alg': 'none', 'kid': 'test-key'})}.{part(claims)}."


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"sign": "other"}, "signature does not verify"),
        ({"aud": "another-client"}, "another client"),
        ({"iss": "http://127.0.0.1:1"}, "another issuer"),
        ({"iat": None}, "lacks the 'iat' claim"),
        ({"events": None}, "events claim"),
        ({"events": {"http://schemas.openid.net/event/other": {}}}, "events claim"),
        ({"events": ["http://schemas.openid.net/event/backchannel-logout"]}, "events claim"),
        ({"nonce": "n-1"}, "no nonce"),
        ({"sub": None}, "neither a subject"),
        ({"exp": int(time.time()) - 600}, "ExpiredSignatureError"),
    ],
)
def test_a_bad_logout_token_is_refused_and_ends_nothing(alices_agent, sso_on, changes, says):
    claims = {"sub": "alice", **changes}
    answer = logout(sso_on.logout_token(**claims))
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"] == "invalid_request" and says in answer.json()["error_description"]
    assert alices_agent["client"].get("/").status_code == 200
    assert alices_agent["agent"].get("/workflows").status_code == 200
    assert not AuditEvent.objects.filter(verb="user.signed_out_at_provider").exists()


def test_unsigned_or_secret_signed_or_missing_logout_tokens_are_refused(alices_agent, sso_on):
    now = int(time.time())
    claims = {
        "iss": sso_on.issuer,
        "aud": CLIENT_ID,
        "iat": now,
        "sub": "alice",
        "events": {"http://schemas.openid.net/event/backchannel-logout": {}},
    }
    hs256 = jwt.encode(claims, CLIENT_SECRET, algorithm="HS256", headers={"kid": "test-key"})
    for token, says in (
        (_unsigned(claims), "'none'"),
        (hs256, "'HS256'"),
        ("", "no logout_token"),
        ("not.a.jwt", "not a valid JWT"),
    ):
        answer = logout(token)
        assert answer.status_code == 400 and says in answer.json()["error_description"]
    assert Client().get(BACKCHANNEL).status_code == 405
    assert alices_agent["client"].get("/").status_code == 200


def test_without_an_issuer_there_is_no_backchannel_endpoint(db):
    assert Client().post(BACKCHANNEL, {"logout_token": "x"}).status_code == 404


# --- silent renewal refused ---------------------------------------------------------------


def test_a_silent_renewal_the_provider_refuses_ends_every_session_and_stops_the_agents(alices_agent, sso_on):
    other_tab = Client()
    sign_in(other_tab)
    sso_on.control(mode="login_required")
    ended = renew(alices_agent["client"])
    assert ended.status_code == 401 and "The identity provider ended your session" in ended.content.decode()
    assert signed_in_user(alices_agent["client"]) is None
    assert other_tab.get("/").status_code == 302
    assert alices_agent["agent"].get("/workflows").status_code == 401
    event = AuditEvent.objects.get(verb="user.signed_out_at_provider")
    assert event.data["via"] == "silent-renewal:login_required" and event.data["sessions_ended"] == 1


# --- no cross-site sign-out ---------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        {"error": "login_required"},
        {"error": "login_required", "state": "forged-state"},
        {"error": "access_denied", "error_description": "x", "state": ""},
    ],
)
def test_a_cross_site_request_to_the_callback_signs_nobody_out(alices_agent, query):
    answer = alices_agent["client"].get("/oidc/callback/", query)
    assert answer.status_code == 400 and "unknown state" in answer.content.decode()
    assert alices_agent["client"].get("/").status_code == 200
    assert alices_agent["agent"].get("/workflows").status_code == 200


def test_sign_out_is_a_post_with_csrf(people):
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="reviewer", password=PASSWORD)
    assert client.get("/logout/").status_code == 405
    assert client.post("/logout/").status_code == 403  # no CSRF token: a cross-site form
    assert client.get("/").status_code == 200
    token = client.get("/").context["csrf_token"]
    answer = client.post("/logout/", {"csrfmiddlewaretoken": token})
    assert answer.status_code == 302 and answer["Location"] == "/login/"
    assert client.get("/").status_code == 302


def test_sso_sign_out_also_ends_the_provider_session(sso_on):
    client = Client()
    sign_in(client)
    answer = client.post("/logout/")
    # A page that goes on to the provider (meta refresh and a link): not a redirect, which CSP form-action holds.
    assert answer.status_code == 200 and signed_in_user(client) is None
    to_provider = answer.context["end_session_url"]
    assert to_provider.startswith(f"{sso_on.issuer}/logout?")
    page = answer.content.decode()
    assert f'content="0; url={to_provider.replace("&", "&amp;")}"' in page and "You are signed out here" in page
    sent = {k: v[0] for k, v in parse_qs(urlsplit(to_provider).query).items()}
    assert sent == {"client_id": CLIENT_ID, "post_logout_redirect_uri": "http://testserver/login/"}
    assert requests.get(to_provider, timeout=5).status_code == 200
    assert any(r["endpoint"] == "logout" for r in sso_on.requests())


# --- SESSION_MAX_AGE --------------------------------------------------------------------------


def _age(client, seconds):
    session = client.session
    session[SESSION_STARTED] = int(time.time()) - seconds
    session.save()


def test_a_local_session_ends_at_session_max_age(people, settings):
    settings.SESSION_MAX_AGE = 3600
    client = Client()
    assert client.login(username="reviewer", password=PASSWORD)
    _age(client, 3500)
    assert client.get("/").status_code == 200
    _age(client, 3601)
    assert client.get("/").status_code == 302 and signed_in_user(client) is None


def test_silent_renewals_do_not_stretch_an_sso_session(sso_on, settings):
    settings.SESSION_MAX_AGE = 3600
    client = Client()
    sign_in(client)
    _age(client, 3500)
    started = client.session[SESSION_STARTED]
    assert renew(client).status_code == 302
    assert client.session[SESSION_STARTED] == started and signed_in_user(client)
    _age(client, 3601)
    assert client.get("/").status_code == 302 and signed_in_user(client) is None


def test_one_setting_sets_the_cookie_and_stored_session_too(settings):
    assert settings.SESSION_COOKIE_AGE == settings.SESSION_MAX_AGE == 8 * 3600


# --- next stays on this site -----------------------------------------------------------------


@pytest.mark.parametrize("evil", EVIL)
def test_next_after_a_local_sign_in_stays_local(people, evil):
    answer = Client().post(f"/login/?next={evil}", {"username": "reviewer", "password": PASSWORD, "next": evil})
    assert answer.status_code == 302 and answer["Location"] == "/"


@pytest.mark.parametrize("evil", EVIL)
def test_next_after_the_sso_callback_stays_local(sso_on, evil):
    client = Client()
    assert sign_in(client, next=evil)["Location"] == "/"
    # Even one that reached the session by another way is not followed.
    client = Client()
    _, back = start(client)
    session = client.session
    session["oidc_login_next"] = evil
    session.save()
    assert client.get(f"{back.path}?{back.query}")["Location"] == "/"


@pytest.mark.parametrize("evil", EVIL)
def test_next_after_a_silent_renewal_stays_local(sso_on, evil):
    client = Client()
    sign_in(client)
    stored = client.session
    stored["oidc_id_token_expiration"] = time.time() - 1
    stored.save()
    to_provider = client.get("/workflows/")
    session = client.session
    session["oidc_login_next"] = evil
    session.save()
    answer = requests.get(to_provider["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(answer.headers["Location"])
    renewed = client.get(f"{back.path}?{back.query}")
    assert renewed.status_code == 302 and renewed["Location"] == "/"


def test_a_local_next_is_followed(sso_on, people):
    assert sign_in(Client(), next="/workflows/?status=PLANNED")["Location"] == "/workflows/?status=PLANNED"
    answer = Client().post("/login/", {"username": "reviewer", "password": PASSWORD, "next": "/audit/"})
    assert answer["Location"] == "/audit/"


def test_ended_sessions_are_gone_from_the_store(alices_agent, sso_on):
    before = Session.objects.count()
    logout(sso_on.logout_token(sub="alice"))
    assert Session.objects.count() == before - 1


# --- what already held: tokens and sessions stop with the account or its role -----------------


def test_deactivating_an_account_stops_its_tokens_and_sessions(people, api):
    client = Client()
    assert client.login(username="reviewer", password=PASSWORD)
    assert api["agent"].get("/workflows").status_code == 200 and api["reviewer"].get("/workflows").status_code == 200
    User.objects.filter(username__in=["agent", "reviewer"]).update(is_active=False)
    assert api["agent"].get("/workflows").status_code == 401
    assert api["reviewer"].get("/workflows").status_code == 401
    assert client.get("/").status_code == 302


def test_losing_a_role_stops_what_the_token_gave(people, api):
    workflow = plans.submit(people["agent"], ticket_plan("role-loss")).workflow
    assert api["reviewer"].get(f"/workflows/{workflow.pk}").status_code == 200
    assert api["auditor"].get("/audit").status_code == 200
    people["reviewer"].groups.clear()
    people["auditor"].groups.clear()
    assert api["reviewer"].get(f"/workflows/{workflow.pk}").status_code == 404
    assert api["auditor"].get("/audit").status_code == 403
