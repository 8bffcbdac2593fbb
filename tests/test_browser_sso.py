"""Signing in through a real OpenID Connect provider process
(oidc-provider-mock, from the package index) in the system Chromium: a
reviewer lands with the mapped role and decides; a person with no mapped
group is signed in, sees nothing, and is told why; a group removed at the
provider is lost at the next sign-in."""

import re
import subprocess
import sys
import time

import pytest
import requests
from playwright.sync_api import expect

from tests.chromium import SCREENSHOTS
from tests.conftest import ticket_plan
from workflows.models import Approval, AuditEvent, ProviderIdentity
from workflows.operations import plans
from workflows.ops.processes import free_port
from workflows.web import sso

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLIENT_ID = "durable-console"


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    """oidc-provider-mock as its own process, nonces required."""
    port = free_port()
    logs = tmp_path_factory.mktemp("oidc-mock")
    with open(logs / "out.log", "w") as out, open(logs / "err.log", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), "--require-nonce",
             "--user-claims", '{"sub": "rita", "email": "rita@example.com", "groups": ["idp-reviewers"]}',
             "--user-claims", '{"sub": "sam", "email": "sam@example.com", "groups": ["idp-marketing"]}'],
            stdout=out, stderr=err)
        issuer = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"{issuer}/.well-known/openid-configuration", timeout=1).raise_for_status()
                break
            except requests.RequestException:
                assert process.poll() is None and time.monotonic() < deadline, (logs / "err.log").read_text()
                time.sleep(0.1)
        yield issuer
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def sso_settings(settings, provider):
    settings.OIDC_ISSUER = provider
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = "mock-accepts-any-secret"
    settings.OIDC_ROLE_MAP = {"reviewers": ["idp-reviewers"]}
    settings.OIDC_TEAM_MAP = {"default": ["idp-reviewers"]}
    sso.forget_provider()
    requests.put(f"{provider}/users/rita", json={"email": "rita@example.com", "groups": ["idp-reviewers"]},
                 timeout=5).raise_for_status()
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


def test_a_person_without_a_mapped_group_is_signed_in_sees_nothing_and_is_told_why(live_server, people,
                                                                                   sso_settings, page):
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

    requests.put(f"{sso_settings}/users/rita", json={"email": "rita@example.com", "groups": []},
                 timeout=5).raise_for_status()
    page.get_by_role("button", name="Log out").click()
    _sign_in_at_provider(page, live_server.url, "rita")
    expect(page.locator("form.who span")).to_have_text("rita@example.com")
    expect(page.locator("#no-role")).to_be_visible()
    assert not ProviderIdentity.objects.get(subject="rita").user.groups.exists()
