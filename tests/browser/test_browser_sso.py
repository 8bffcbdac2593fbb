"""Signing in through a real OpenID Connect provider process
(oidc-provider-mock, from the package index) in the system Chromium: a
reviewer lands with the mapped role and decides; a person with no mapped
group is signed in, sees nothing, and is told why; a group removed at the
provider is lost at the next sign-in; signing out ends the provider's
session too."""

import re

import pytest
from playwright.sync_api import expect

from tests.support.chromium import SCREENSHOTS
from tests.support.oidc_mock import running_provider, set_person
from tests.support.plans import ticket_plan
from tests.support.seeing import previews_taken
from workflows.models import Approval, AuditEvent, ProviderIdentity
from workflows.operations import plans
from workflows.web import sso

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLIENT_ID = "durable-console"


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    with running_provider(
        tmp_path_factory.mktemp("oidc-mock"),
        '{"sub": "rita", "email": "rita@example.com", "groups": ["idp-reviewers"]}',
        '{"sub": "sam", "email": "sam@example.com", "groups": ["idp-marketing"]}',
    ) as issuer:
        yield issuer


@pytest.fixture
def sso_settings(settings, provider):
    settings.OIDC_ISSUER = provider
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = "mock-accepts-any-secret"
    settings.OIDC_ROLE_MAP = {"reviewers": ["idp-reviewers"]}
    settings.OIDC_TEAM_MAP = {"default": ["idp-reviewers"]}
    sso.forget_provider()
    set_person(provider, "rita", email="rita@example.com", groups=["idp-reviewers"])
    yield provider
    sso.forget_provider()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def _sign_in_at_provider(page, base_url, sub):
    page.goto(f"{base_url}/login/")
    page.get_by_role("link", name="Sign in with your identity provider").click()
    # The provider's own page: its one-click button for a predefined person.
    page.get_by_role("button", name=sub, exact=True).click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(base_url)}/"))


def test_a_reviewer_signs_in_through_the_provider_and_decides(live_server, people, sso_settings, page):
    workflow = plans.submit(people["agent"], ticket_plan("sso-journey", name="Printer ticket")).workflow
    previews_taken(workflow.pk)  # as a worker does after submission: the page shows them
    _sign_in_at_provider(page, live_server.url, "rita")
    expect(page.get_by_role("heading", name="Plans awaiting your review")).to_be_visible()
    expect(page.locator("form.who span")).to_have_text("rita@example.com · reviewer")
    page.screenshot(path=SCREENSHOTS / "sso-inbox.png", full_page=True)

    page.get_by_role("link", name="Printer ticket", exact=True).click()
    page.get_by_label("Comment").fill("Checked after signing in with SSO")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("workflow-status")).to_have_text("APPROVED")

    identity = ProviderIdentity.objects.get(subject="rita")
    assert identity.issuer == sso_settings and identity.user.groups.filter(name="reviewers").exists()
    assert Approval.objects.get(workflow=workflow).reviewer == identity.user
    decided = AuditEvent.objects.filter(workflow_id=workflow.pk, actor=identity.user.username).latest("id")
    assert (decided.subject, decided.issuer, decided.client_address) == ("rita", sso_settings, "127.0.0.1")


def test_a_person_without_a_mapped_group_is_signed_in_sees_nothing_and_is_told_why(
    live_server, people, sso_settings, page
):
    plans.submit(people["agent"], ticket_plan("sso-hidden", name="Hidden from sam"))
    _sign_in_at_provider(page, live_server.url, "sam")
    notice = page.locator("#no-role")
    expect(notice).to_contain_text("You are signed in, but have no role here")
    expect(notice).to_contain_text("idp-marketing")
    expect(page.locator("form.who span")).to_have_text("sam@example.com")
    page.screenshot(path=SCREENSHOTS / "sso-no-role.png", full_page=True)
    page.goto(f"{live_server.url}/workflows/")
    expect(page.locator("main")).not_to_contain_text("Hidden from sam")
    assert not ProviderIdentity.objects.get(subject="sam").user.groups.exists()


def test_a_group_removed_at_the_provider_is_lost_at_the_next_sign_in(live_server, people, sso_settings, page):
    _sign_in_at_provider(page, live_server.url, "rita")
    expect(page.locator("form.who span")).to_have_text("rita@example.com · reviewer")

    set_person(sso_settings, "rita", email="rita@example.com", groups=[])
    page.get_by_role("button", name="Log out").click()
    # Sign-out goes on to the provider's end-session page; finish it before signing in again,
    # or the next navigation races that redirect.
    expect(page).to_have_url(re.compile(rf"^{re.escape(sso_settings)}/oauth2/end_session\?"))
    page.get_by_role("button", name="End session").click()
    expect(page).to_have_url(f"{live_server.url}/login/")
    _sign_in_at_provider(page, live_server.url, "rita")
    expect(page.locator("form.who span")).to_have_text("rita@example.com")
    expect(page.locator("#no-role")).to_be_visible()
    assert not ProviderIdentity.objects.get(subject="rita").user.groups.exists()


def test_signing_out_ends_the_session_at_the_provider_too(live_server, people, sso_settings, page):
    _sign_in_at_provider(page, live_server.url, "rita")
    expect(page.locator("form.who span")).to_have_text("rita@example.com · reviewer")
    page.get_by_role("button", name="Log out").click()
    # The provider's end-session page (RP-Initiated Logout), told where to send the person back.
    expect(page).to_have_url(re.compile(rf"^{re.escape(sso_settings)}/oauth2/end_session\?"))
    expect(page.locator("body")).to_contain_text(f"{live_server.url}/login/")
    page.get_by_role("button", name="End session").click()
    expect(page).to_have_url(f"{live_server.url}/login/")
    page.goto(f"{live_server.url}/workflows/")
    expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}/login/\?next="))
