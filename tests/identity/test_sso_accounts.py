"""What an SSO sign-in makes of the account (docs/explanation/decisions.md#bound-decisions), against the real
provider process: a role holder with no mapped team gets none (a page says
why) unless OIDC_DEFAULT_TEAM names one; an SSO and a local account are
one person for four-eyes when the provider vouches for an email of a
trusted domain, and that link gives nothing else; LOCAL_LOGIN is off by
default once there is a provider."""

import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import Group, User

from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from tests.support.sso import sign_in, signed_in_user
from workflows import persons, roles, teams
from workflows.models import AccountLink, AuditEvent, Team
from workflows.operations import notifications, plans

# --- no team unless mapped or OIDC_DEFAULT_TEAM -------------------------------------------


def test_a_role_holder_with_no_mapped_team_gets_no_team_and_is_told_why(sso_on, people):
    workflow = plans.submit(people["agent"], ticket_plan("default-team")).workflow
    sso_on.control(groups=["idp-ops"])  # operators: a role, and no team in TEAM_MAP
    client = Client()
    assert sign_in(client).status_code == 302
    alice = User.objects.get(username="alice")
    assert roles.is_operator(alice) and not alice.teams.exists() and teams.team_ids(alice) == set()
    page = client.get("/").content.decode()
    assert "You are signed in, but have no team here" in page and "idp-ops" in page
    assert client.get(f"/workflows/{workflow.pk}/").status_code == 404
    assert workflow.name not in client.get("/workflows/").content.decode()
    # Nor is she one of `default`'s people, as a local account with no team is.
    alice.groups.add(Group.objects.get(name=roles.REVIEWERS))
    assert alice not in notifications.reviewers_for(workflow)
    assert people["reviewer"] in notifications.reviewers_for(workflow)


def test_oidc_default_team_gives_the_role_holder_that_team(sso_on, settings, people):
    settings.OIDC_DEFAULT_TEAM = "night-shift"
    sso_on.control(groups=["idp-ops"])
    client = Client()
    sign_in(client)
    alice = User.objects.get(username="alice")
    assert list(alice.teams.values_list("name", flat=True)) == ["night-shift"]
    assert "no team here" not in client.get("/").content.decode()
    assert AuditEvent.objects.get(verb="user.signed_in").data["teams"] == ["night-shift"]
    # Someone with no role gets no team from it.
    sso_on.control(sub="bob", groups=["idp-marketing"])
    sign_in(Client())
    assert not User.objects.get(username="bob").teams.exists()


def test_a_mapped_team_wins_over_the_default(sso_on, settings):
    settings.OIDC_DEFAULT_TEAM = "night-shift"
    sso_on.control(groups=["idp-reviewers", "idp-payments"])
    sign_in(Client())
    assert set(User.objects.get(username="alice").teams.values_list("name", flat=True)) == {"payments", "default"}
    assert not Team.objects.filter(name="night-shift").exists()


# --- SSO and local accounts of one person -----------------------------------------------


@pytest.fixture
def local_bob(people):
    bob = User.objects.create_user("bob-local", email="Bob@Corp.example", password="x")
    bob.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    return bob


def test_a_verified_email_of_a_trusted_domain_links_the_local_account(sso_on, settings, local_bob):
    settings.OIDC_LINK_EMAIL_DOMAINS = ["corp.example"]
    sso_on.control(sub="bob", groups=["idp-reviewers"], email="bob@corp.example", email_verified=True)
    sign_in(Client())
    sso_bob = User.objects.get(username="bob")
    assert persons.same(sso_bob, local_bob)
    event = AuditEvent.objects.get(verb="person.linked")
    assert event.data == {"accounts": ["bob", "bob-local"], "via": "sso-email"}
    # Four-eyes only: no role, team or sign-in passes across the link.
    assert set(sso_bob.groups.values_list("name", flat=True)) == {roles.REVIEWERS}
    assert set(local_bob.groups.values_list("name", flat=True)) == {roles.OPERATORS}
    assert not local_bob.teams.exists() and local_bob.has_usable_password()
    sign_in(Client())  # again: nothing more to link
    assert AuditEvent.objects.filter(verb="person.linked").count() == 1


@pytest.mark.parametrize(
    "claims, domains",
    [
        ({"email": "bob@corp.example", "email_verified": False}, ["corp.example"]),
        ({"email": "bob@corp.example", "email_verified": None}, ["corp.example"]),
        ({"email": "bob@corp.example", "email_verified": "true"}, ["corp.example"]),
        ({"email": "bob@corp.example", "email_verified": True}, ["other.example"]),
        ({"email": "bob@corp.example", "email_verified": True}, []),
        ({"email": "bob@evil.corp.example", "email_verified": True}, ["corp.example"]),
    ],
)
def test_no_link_without_a_verified_email_of_a_trusted_domain(sso_on, settings, local_bob, claims, domains):
    settings.OIDC_LINK_EMAIL_DOMAINS = domains
    sso_on.control(sub="bob", groups=["idp-reviewers"], **claims)
    sign_in(Client())
    assert not AccountLink.objects.exists() and not AuditEvent.objects.filter(verb="person.linked").exists()


def test_no_link_when_several_or_no_active_local_accounts_have_the_email(sso_on, settings, local_bob):
    settings.OIDC_LINK_EMAIL_DOMAINS = ["corp.example"]
    User.objects.create_user("bob-again", email="bob@corp.example", password="x")
    sso_on.control(sub="bob", groups=[], email="bob@corp.example", email_verified=True)
    sign_in(Client())
    assert not AccountLink.objects.exists()

    User.objects.filter(username="bob-again").update(is_active=False)
    local_bob.is_active = False
    local_bob.save()
    sign_in(Client())
    assert not AccountLink.objects.exists()

    local_bob.is_active = True
    local_bob.save()
    client = Client()
    sign_in(client)
    assert persons.same(User.objects.get(username="bob"), local_bob)
    assert signed_in_user(client) == str(User.objects.get(username="bob").pk)  # never the local account


# --- LOCAL_LOGIN defaults --------------------------------------------------------------------


@pytest.mark.parametrize(
    "environment, local_login",
    [
        ({}, True),
        ({"OIDC_ISSUER": "https://id.example.com", "OIDC_CLIENT_ID": "c", "OIDC_CLIENT_SECRET": "s"}, False),
        (
            {
                "OIDC_ISSUER": "https://id.example.com",
                "OIDC_CLIENT_ID": "c",
                "OIDC_CLIENT_SECRET": "s",
                "LOCAL_LOGIN": "1",
            },
            True,
        ),
    ],
)
def test_local_login_is_off_by_default_with_a_provider(environment, local_login):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OIDC_", "LOCAL_LOGIN"))}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.LOCAL_LOGIN, settings.SESSION_MAX_AGE)",
        ],
        env={**environ, "DJANGO_SETTINGS_MODULE": "durableconsole.settings", "DEBUG": "1", **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(local_login), "28800"]


def test_a_bad_default_team_stops_start_up():
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OIDC_", "LOCAL_LOGIN"))}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={
            **environ,
            "DJANGO_SETTINGS_MODULE": "durableconsole.settings",
            "DEBUG": "1",
            "OIDC_DEFAULT_TEAM": "night shift",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "must be a slug" in result.stderr
