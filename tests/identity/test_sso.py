"""Sign-in through an OpenID Connect provider (docs/explanation/teams.md#teams), against a real
provider process that can issue bad tokens (tests/support/oidc_provider.py): the
code flow with state, nonce and PKCE; every bad ID token refused with its
reason and no session; groups and teams from the maps at every sign-in;
sessions the provider ends; LOCAL_LOGIN=0; decisions that need a recent
sign-in; settings that fail loudly."""

import html
import os
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth.models import Group, User
from django.core.exceptions import ImproperlyConfigured

from tests.support import deciding as decide
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, OTHER_ISSUER_PATH
from tests.support.personas import PASSWORD
from tests.support.plans import gated_plan, ticket_plan
from tests.support.running import run_until
from tests.support.seeing import Client
from tests.support.sso import sign_in, signed_in_user, start
from workflows import env
from workflows.engine import execution, gates
from workflows.models import Approval, AuditEvent, GateApproval, ProviderIdentity, Team, Workflow
from workflows.operations import plans
from workflows.ops.processes import free_port
from workflows.states import StepStatus
from workflows.web import sso
from workflows.web.auth import SIGNED_IN_AT


def test_sign_in_runs_the_code_flow_with_state_nonce_and_pkce(sso_on):
    client = Client()
    to_provider, _ = start(client, next="/workflows/")
    sent = {k: v[0] for k, v in parse_qs(urlsplit(to_provider).query).items()}
    assert sent["response_type"] == "code" and sent["client_id"] == CLIENT_ID
    assert sent["code_challenge_method"] == "S256" and len(sent["code_challenge"]) >= 43
    assert len(sent["state"]) >= 32 and len(sent["nonce"]) >= 32
    assert "openid" in sent["scope"].split()

    answer = sign_in(client, next="/workflows/")
    assert answer.status_code == 302 and answer["Location"] == "/workflows/"
    token_request = next(r for r in sso_on.requests() if r["endpoint"] == "token")
    assert token_request["code_verifier"] and token_request["client_secret_sent"]  # the provider checked PKCE

    user = User.objects.get(pk=signed_in_user(client))
    identity = ProviderIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject, user.username) == (sso_on.issuer, "alice", "alice")
    assert set(user.groups.values_list("name", flat=True)) == {"reviewers"}
    assert not user.has_usable_password()
    page = client.get("/")
    assert page.status_code == 200 and b"alice \xc2\xb7 reviewer" in page.content


@pytest.mark.parametrize(
    "mode, says",
    [
        ("wrong_audience", "issued for another client (wrong audience)"),
        ("bad_signature", "signature does not verify"),
        ("expired", "has expired"),
        ("wrong_nonce", "nonce does not match"),
        ("alg_none", "signed with 'none', which is not accepted"),
        ("hs256", "signed with 'HS256', which is not accepted"),
        ("wrong_issuer", "issued by another issuer"),
        ("wrong_azp", "names several audiences but not this client as its authorized party"),
        ("foreign_azp", "issued to another client (its authorized party"),
    ],
)
def test_a_bad_id_token_is_refused_with_its_reason_and_no_session(sso_on, mode, says):
    sso_on.control(mode=mode)
    client = Client()
    answer = sign_in(client)
    assert answer.status_code == 403
    assert says in html.unescape(answer.content.decode())
    assert signed_in_user(client) is None and client.get("/").status_code == 302
    assert not ProviderIdentity.objects.exists() and not User.objects.filter(username="alice").exists()
    assert not AuditEvent.objects.filter(verb="user.signed_in").exists()


def test_a_discovery_document_naming_another_issuer_stops_the_sign_in_before_the_provider(sso_on):
    """Its endpoints and keys are not the configured issuer's, whatever its tokens say."""
    sso_on.control(mode="discovery_issuer")
    client = Client()
    answer = client.get("/oidc/authenticate/")
    assert answer.status_code == 503
    assert f"names another issuer ('{sso_on.issuer}{OTHER_ISSUER_PATH}')" in html.unescape(answer.content.decode())
    assert not [r for r in sso_on.requests() if r["endpoint"] == "authorize"]
    assert signed_in_user(client) is None and not User.objects.filter(username="alice").exists()


def test_a_bad_token_does_not_keep_an_earlier_session(sso_on):
    client = Client()
    sign_in(client)
    assert signed_in_user(client)
    sso_on.control(mode="bad_signature")
    assert sign_in(client).status_code == 403
    assert signed_in_user(client) is None


def test_an_answer_with_an_unknown_or_replayed_state_is_refused(sso_on):
    client = Client()
    _, back = start(client)
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    forged = client.get("/oidc/callback/", {"code": query["code"], "state": "forged-state"})
    assert forged.status_code == 400 and "unknown state" in forged.content.decode()
    assert client.get(f"/oidc/callback/?{back.query}").status_code == 302  # the real answer still signs in
    client.logout()
    replayed = client.get(f"/oidc/callback/?{back.query}")
    assert replayed.status_code == 400 and signed_in_user(client) is None


def test_a_provider_that_is_down_gets_a_clear_page_not_a_server_error(settings, db):
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    sso.forget_provider()
    answer = Client().get("/oidc/authenticate/")
    assert answer.status_code == 503
    assert "The identity provider cannot be reached" in answer.content.decode()
    assert "discovery document" in answer.content.decode()


def test_without_an_issuer_the_sso_routes_are_not_there(db):
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
    assert b"identity provider" not in Client().get("/login/").content


def test_groups_and_teams_are_exactly_what_the_maps_yield_at_every_sign_in(sso_on):
    sso_on.control(groups=["idp-reviewers", "idp-payments", "unmapped"])
    client = Client()
    sign_in(client)
    user = User.objects.get(username="alice")
    assert set(user.groups.values_list("name", flat=True)) == {"reviewers", "payments-reviewers"}
    assert set(user.teams.values_list("name", flat=True)) == {"payments", "default"}
    user.groups.add(Group.objects.get_or_create(name="operators")[0])  # granted here, not by the provider

    sso_on.control(groups=["idp-ops"])
    client.logout()
    sign_in(client)
    user = User.objects.get(pk=user.pk)
    assert set(user.groups.values_list("name", flat=True)) == {"operators"}
    assert not user.teams.exists() and Team.objects.filter(name="payments").exists()
    event = AuditEvent.objects.filter(verb="user.signed_in").order_by("-id").first()
    assert event.data["roles_removed"] == ["payments-reviewers", "reviewers"]
    assert event.data["roles_added"] == []  # operators was held already
    assert (event.subject, event.issuer, event.client_address) == ("alice", sso_on.issuer, "127.0.0.1")


def test_a_first_sign_in_never_takes_over_a_local_account(sso_on, people):
    sso_on.control(sub="reviewer", groups=[])
    client = Client()
    sign_in(client)
    user = User.objects.get(pk=signed_in_user(client))
    assert user.username == "reviewer-2" and user.pk != people["reviewer"].pk
    assert people["reviewer"].groups.filter(name="reviewers").exists()


def test_a_signed_in_person_without_a_mapped_group_sees_nothing_and_is_told_why(sso_on, people):
    plans.submit(people["agent"], ticket_plan("hidden", name="Hidden plan"))
    sso_on.control(groups=["idp-marketing"])
    client = Client()
    assert sign_in(client).status_code == 302
    page = client.get("/").content.decode()
    assert "You are signed in, but have no role here" in page and "idp-marketing" in page
    assert "Hidden plan" not in client.get("/workflows/").content.decode()
    assert client.get("/audit/").status_code == 403


def test_reviewer_removed_at_the_provider_no_longer_counts_at_the_recheck(sso_on, people):
    """Their approval, made while a reviewer, is treated like a deactivated
    reviewer's: the step is blocked before any effect."""
    client = Client()
    sign_in(client)
    alice = User.objects.get(username="alice")
    noop = [{"key": "s", "action": "noop", "args": {}}]
    workflow = plans.submit(people["agent"], {"name": "n", "submission_key": "n", "steps": noop}).workflow
    assert client.post(f"/workflows/{workflow.pk}/approve", {"comment": "ok"}).status_code == 302
    assert Approval.objects.filter(workflow=workflow, reviewer=alice).exists()

    sso_on.control(groups=[])
    client.logout()
    sign_in(client)
    execution.run_batch(execution.claim_batch())
    step = workflow.steps.get()
    assert (step.status, step.failure_class) == (StepStatus.BLOCKED, "POLICY_FAILED")


def test_the_provider_ending_the_session_signs_out_at_the_next_request(sso_on):
    client = Client()
    sign_in(client)
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()
    sso_on.control(mode="login_required")

    renew = client.get("/workflows/")
    assert renew.status_code == 302 and "prompt=none" in renew["Location"]
    answer = requests.get(renew["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(answer.headers["Location"])
    ended = client.get(f"{back.path}?{back.query}")
    assert ended.status_code == 401 and "The identity provider ended your session" in ended.content.decode()
    assert signed_in_user(client) is None


def test_a_renewal_the_provider_grants_keeps_the_session(sso_on):
    client = Client()
    sign_in(client)
    user_id = signed_in_user(client)
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()
    renew = client.get("/workflows/")
    assert renew.status_code == 302
    answer = requests.get(renew["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(answer.headers["Location"])
    again = client.get(f"{back.path}?{back.query}")
    assert again.status_code == 302 and again["Location"] == "/workflows/"
    assert signed_in_user(client) == user_id
    assert client.session["oidc_id_token_expiration"] > time.time()


def test_a_silent_renewal_does_not_count_as_signing_in_again(sso_on, settings):
    """Without the provider's auth_time, a renewal nobody typed a password
    for leaves the sign-in time as it was: a decision still asks."""
    sso_on.control(auth_time=False)
    client = Client()
    sign_in(client)
    _stale(client, settings)
    stale = client.session[SIGNED_IN_AT]
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()
    renew = client.get("/workflows/")
    answer = requests.get(renew["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(answer.headers["Location"])
    assert client.get(f"{back.path}?{back.query}").status_code == 302
    assert client.session[SIGNED_IN_AT] == stale and client.session["oidc_id_token_expiration"] > time.time()

    sign_in(client, reauth="1")  # a real sign-in again
    assert time.time() - client.session[SIGNED_IN_AT] < 60


def test_an_htmx_request_due_for_renewal_is_sent_through_the_provider_whole(sso_on):
    client = Client()
    sign_in(client)
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()
    answer = client.post(
        "/workflows/00000000-0000-0000-0000-000000000000/approve",
        {},
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/workflows/",
    )
    assert answer.status_code == 204 and answer["HX-Redirect"].startswith(sso_on.issuer + "/authorize")
    assert client.session["oidc_login_next"] == "/workflows/"


def test_local_sessions_are_not_sent_to_the_provider(sso_on, people):
    client = Client()
    assert client.login(username="reviewer", password=PASSWORD)
    assert client.get("/").status_code == 200


# --- LOCAL_LOGIN ------------------------------------------------------------------


def test_local_login_off_leaves_only_the_provider(sso_on, settings, people):
    settings.LOCAL_LOGIN = False
    page = Client().get("/login/").content.decode()
    assert "Sign in with your identity provider" in page and 'name="password"' not in page
    client = Client()
    refused = client.post("/login/", {"username": "reviewer", "password": PASSWORD})
    assert refused.status_code == 403 and "LOCAL_LOGIN=0" in refused.content.decode()
    assert signed_in_user(client) is None
    assert not client.login(username="reviewer", password=PASSWORD)  # nor the admin's login, nor any other
    admin = client.post("/admin/login/", {"username": "admin", "password": PASSWORD})
    assert admin.status_code == 200 and signed_in_user(client) is None
    assert sign_in(client).status_code == 302 and signed_in_user(client)


def test_local_login_on_offers_both(sso_on, people):
    page = Client().get("/login/").content.decode()
    assert "Sign in with your identity provider" in page and 'name="password"' in page
    client = Client()
    assert client.post("/login/", {"username": "reviewer", "password": PASSWORD}).status_code == 302
    assert signed_in_user(client)


# --- decisions need a recent sign-in --------------------------------------------------


def _stale(client, settings):
    session = client.session
    session[SIGNED_IN_AT] = int(time.time()) - settings.DECISION_MAX_AUTH_AGE - 60
    session.save()


@pytest.mark.parametrize(
    "route, verb",
    [
        ("approve", "workflow.approved"),
        ("reject", "workflow.rejected"),
        ("steps/close/approve", "gate.opened"),
        ("steps/close/reject", "gate.rejected"),
    ],
)
def test_a_console_decision_needs_a_recent_sign_in(route, verb, people, desk, settings):
    if route.startswith("steps/"):  # a gate decision: the plan approved, the run waiting at its gate
        workflow = plans.submit(people["agent"], gated_plan("stale")).workflow
        decide.approve(workflow, by=people["reviewer2"])
        run_until(workflow.pk, "WAITING_GATE")
    else:
        workflow = plans.submit(people["agent"], ticket_plan("stale")).workflow
    workflow.refresh_from_db()
    status = workflow.status
    # What the page's form carries: the revision and plan it shows (and at a gate, the results it shows).
    form = {"comment": "x", "revision": workflow.revision, "plan_hash": workflow.plan_hash}
    if route.startswith("steps/"):
        form["results_digest"] = gates.results_digest(workflow.steps.get(key="close"))
    client = Client()
    assert client.login(username="reviewer", password=PASSWORD)
    _stale(client, settings)
    answer = client.post(f"/workflows/{workflow.pk}/{route}", form)
    assert answer.status_code == 302
    assert answer["Location"] == f"/login/?next=%2Fworkflows%2F{workflow.pk}%2F&reauth=1"
    htmx = client.post(f"/workflows/{workflow.pk}/{route}", form, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 204 and htmx["HX-Redirect"].startswith("/login/?next=")
    assert not Approval.objects.filter(reviewer=people["reviewer"]).exists()
    assert not GateApproval.objects.exists() and Workflow.objects.get(pk=workflow.pk).status == status
    assert not AuditEvent.objects.filter(actor="reviewer").exists()

    assert client.login(username="reviewer", password=PASSWORD)  # signing in again
    decided = client.post(f"/workflows/{workflow.pk}/{route}", form)
    assert decided.status_code == 302 and decided["Location"] == f"/workflows/{workflow.pk}/"
    # The same form, once the sign-in is recent, decided: its event is the reviewer's.
    assert AuditEvent.objects.filter(actor="reviewer", verb=verb, workflow_id=workflow.pk).count() == 1
    assert Workflow.objects.get(pk=workflow.pk).status != status


def test_signing_in_again_at_the_provider_asks_it_to_authenticate_anew(sso_on, settings):
    client = Client()
    sign_in(client)
    _stale(client, settings)
    login_page = client.get("/login/?next=/workflows/&reauth=1").content.decode()
    assert "/oidc/authenticate/?next=%2Fworkflows%2F&amp;reauth=1" in login_page
    to_provider, _ = start(client, next="/workflows/", reauth="1")
    sent = {k: v[0] for k, v in parse_qs(urlsplit(to_provider).query).items()}
    assert (sent["prompt"], sent["max_age"]) == ("login", "0")
    sign_in(client, reauth="1")
    assert time.time() - client.session[SIGNED_IN_AT] < 60  # the provider's auth_time


# --- settings fail loudly -----------------------------------------------------------


@pytest.mark.parametrize(
    "raw, says",
    [
        ("not json", "must be a JSON object"),
        ('["reviewers"]', "must be a JSON object"),
        ('{"reviewers": "idp"}', "must map to a list"),
        ('{"reviewers": [1]}', "must map to a list"),
    ],
)
def test_a_bad_group_map_stops_start_up(monkeypatch, raw, says):
    monkeypatch.setenv("OIDC_ROLE_MAP", raw)
    with pytest.raises(ImproperlyConfigured, match=says):
        env.env_group_map("OIDC_ROLE_MAP")


def test_bad_proxies_and_secrets_stop_start_up(monkeypatch, tmp_path):
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.0/8, not-an-address")
    with pytest.raises(ImproperlyConfigured, match="not-an-address"):
        env.env_networks("TRUSTED_PROXIES")
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.1, 192.168.0.0/16")
    assert env.env_networks("TRUSTED_PROXIES") == ["10.0.0.1/32", "192.168.0.0/16"]
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("OIDC_CLIENT_SECRET_FILE", str(secret))
    assert env.env_secret("OIDC_CLIENT_SECRET") == "s3cret"
    monkeypatch.setenv("OIDC_CLIENT_SECRET", "also")
    with pytest.raises(ImproperlyConfigured, match="not both"):
        env.env_secret("OIDC_CLIENT_SECRET")


@pytest.mark.parametrize(
    "environment, says",
    [
        ({"LOCAL_LOGIN": "0"}, "LOCAL_LOGIN=0 needs OIDC_ISSUER"),
        ({"OIDC_ISSUER": "https://id.example.com"}, "needs OIDC_CLIENT_ID and OIDC_CLIENT_SECRET"),
        ({"OIDC_ISSUER": "id.example.com", "OIDC_CLIENT_ID": "c", "OIDC_CLIENT_SECRET": "s"}, "https:// URL"),
        ({"OIDC_TEAM_MAP": '{"a team": ["g"]}'}, "must be a slug"),
        ({"LOCAL_LOGIN": "maybe"}, "LOCAL_LOGIN must be one of"),
        ({"OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": "0"}, "at least 1"),
    ],
)
def test_bad_sign_in_settings_stop_start_up(environment, says):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OIDC_", "LOCAL_LOGIN"))}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**environ, "DJANGO_SETTINGS_MODULE": "durableconsole.settings", "DEBUG": "1", **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and says in result.stderr
