"""Every console page in the system Chromium, at a desktop's width (1280 px)
and a phone's (390 px, a reviewer deciding from a phone): no text drawn on
top of other text, no console error, no failed request, and no serious or
critical accessibility violation by axe-core's rules (axe-core from the npm
registry, pinned in package.json, run in the page itself)."""

import hashlib
import json
import os
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import resolve, reverse
from django.urls.converters import UUIDConverter

from tests.support import deciding as decide
from tests.support.chromium import SCREENSHOTS
from tests.support.desk import free_port
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from workflows import actions, outbox
from workflows.actions import ActionError
from workflows.engine import execution, outcomes
from workflows.models import Attempt, DeadLetter, Workflow
from workflows.operations import bulk, chat_links, compensation, links, plans
from workflows.shapes import workflow_out
from workflows.web import urls as console_urls
from workflows.webhooks import delivery as webhook_delivery
from workflows.webhooks import endpoints as webhook_endpoints
from workflows.webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.browser, pytest.mark.once, pytest.mark.django_db(transaction=True)]

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
AXE = Path(settings.BASE_DIR) / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = {"desktop": 1280, "phone": 390}

# Text boxes of one page that intersect by more than this (px, each way).
OVERLAPPING_TEXT = """() => {
  // Only text a person sees: not visually hidden (screen-reader text,
  // closed <details>, display/visibility), cut to what its scrolling or
  // clipping boxes let show.
  const shown = (el) => {
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
    const fold = el.closest("details");
    if (fold && !fold.open && !el.closest("summary")) return false;
    for (let e = el; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if ((s.clip && s.clip !== "auto") || (s.clipPath && s.clipPath !== "none")) return false;
    }
    return true;
  };
  const clipped = (el, r) => {
    let box = {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
    for (let e = el; e && e !== document.body; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX !== "visible" || s.overflowY !== "visible") {
        const c = e.getBoundingClientRect();
        box = {left: Math.max(box.left, c.left), top: Math.max(box.top, c.top),
               right: Math.min(box.right, c.right), bottom: Math.min(box.bottom, c.bottom)};
      }
    }
    return box;
  };
  const boxes = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const text = node.textContent.trim();
    const el = node.parentElement;
    if (!text || !el || !shown(el)) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const rect of range.getClientRects()) {
      const r = clipped(el, rect);
      if (r.right - r.left >= 1 && r.bottom - r.top >= 1) boxes.push({r, text: text.slice(0, 40)});
    }
  }
  const found = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i].r, b = boxes[j].r;
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 2 && h > 2) found.push([boxes[i].text, boxes[j].text]);
    }
  }
  return found.slice(0, 10);
}"""

SERIOUS_VIOLATIONS = """async () => {
  const results = await axe.run(document, {resultTypes: ["violations"]});
  return results.violations.filter(v => v.impact === "serious" || v.impact === "critical")
    .map(v => ({rule: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}));
}"""


@pytest.fixture(scope="module")
def axe_source():
    if not AXE.exists():
        reason = f"{AXE} is missing: `make setup-browser-checks` (npm ci) installs axe-core"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return AXE.read_text()


@pytest.fixture
def world(people, desk, settings):
    """Something on every page: a plan awaiting review with long and nested
    arguments, a failed run with a dead letter, a compensation awaiting its
    authorization, failed attempts of several classes."""
    plan = ticket_plan("pages-planned")
    plan["steps"][0]["args"] = {"title": "A long title that wraps " * 6, "body": "Line one\nLine two\n" * 20}
    planned = plans.submit(people["agent"], plan).workflow
    body = {
        "name": "half done",
        "submission_key": "pages-failed",
        "steps": [
            {
                "key": "first",
                "action": "ticket.create",
                "args": {"title": "opened"},
                "compensation": {"action": "ticket.close", "args": {"ticket_id": {"$from": "first.result.id"}}},
            },
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
        ],
    }
    failed = plans.submit(people["agent"], body).workflow
    decide.approve(failed, by=people["reviewer2"])
    execution.execute(execution.claim(failed.pk))
    step = execution.claim(failed.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("PERMISSION_DENIED", "HTTP 403"), step.fence
    )
    for failure_class in ("RATE_LIMITED", "TIMEOUT", "INVALID_ARGUMENTS", "DEPENDENCY_UNAVAILABLE", "UNKNOWN"):
        Attempt.objects.create(
            step=step,
            number=Attempt.objects.filter(step=step).count() + 1,
            operation_key=step.operation_key,
            status="FAILED",
            failure_class=failure_class,
            fence=step.fence,
            worker="pages",
        )
    failed.refresh_from_db()
    comp = compensation.request(Workflow.objects.get(pk=failed.pk), by=people["operator"], reason="undo it")
    dead = DeadLetter.objects.get(workflow=failed)
    job, _ = bulk.reconcile(people["admin"], {"ids": [dead.pk]}, shown_filter={"ids": [str(dead.pk)]}, dry_run=True)
    # A webhook endpoint nobody listens on, and its one delivery, dead after one try.
    settings.WEBHOOK_MAX_ATTEMPTS = 1
    endpoint, _ = webhook_endpoints.create(by=people["operator"], url=f"http://127.0.0.1:{free_port()}/hook")
    outbox.emit("workflow.failed", failed.pk, shape=workflow_out)
    for attempt in webhook_delivery.claim():
        webhook_delivery.record(webhook_delivery.send(attempt))
    return {
        "planned": planned.pk,
        "failed": failed.pk,
        "comp": comp.pk,
        "dead": dead.pk,
        "job": job.pk,
        "endpoint": endpoint.pk,
        "delivery": WebhookDelivery.objects.get(endpoint=endpoint).pk,
        # The confirmation page of a review link sent to the admin, who signs in for the pages.
        "link": links.make(planned, people["admin"], "approve"),
        # The page that links a Slack user to the signed-in account (its handshake).
        "slack_link": _slack_link_token(settings),
    }


def _slack_link_token(settings) -> str:
    settings.SLACK_TEAM_ID = "T0PAGES"
    return chat_links.make_token("T0PAGES", "U0PAGES", "pages")


def pages(w):
    return [
        "/",
        "/workflows/",
        f"/workflows/{w['planned']}/",
        f"/workflows/{w['planned']}/revise",
        f"/workflows/{w['planned']}/changed",
        f"/decisions/confirm?decision=approve&workflow={w['planned']}",
        f"/workflows/{w['failed']}/",
        f"/workflows/{w['failed']}/compensate",
        "/compensations/",
        f"/compensations/{w['comp']}/",
        "/dead-letters/",
        f"/dead-letters/{w['dead']}/",
        f"/jobs/{w['job']}/",
        "/jobs/",
        "/webhooks/",
        f"/webhooks/{w['endpoint']}/",
        "/webhook-deliveries/",
        f"/webhook-deliveries/{w['delivery']}/",
        f"/review/link/{w['link']}/",
        f"/chat/slack/link/{w['slack_link']}/",
        "/attention/",
        "/dashboard/",
        "/analytics/",
        "/me/delegation/",
        "/grants/",
        "/policy-sets/default/",
        "/policy-sets/default/playground",
        "/audit/",
        "/actions/",
        "/actions/ticket.create/policy",
        "/policy-sets/default/",
        "/policy-sets/default/playground",
    ]


# Routes of the console that are not pages to look at: sign-in plumbing
# (tests/browser/test_browser_sso.py runs it in the browser), the detail page's own
# partial, files, and machine endpoints. Every other route is a page, checked
# below, or a form's action, which answers a GET with 405.
NOT_PAGES = {
    "logout",
    "oidc_authentication_init",
    "oidc_authentication_callback",
    "workflow_steps",
    "audit_export_csv",
    "audit_export_jsonl",
    "analytics_csv",
    "jwks",
    "healthz",
    "metrics",
    "slack_interactions",
}


def test_every_console_page_is_among_the_pages_checked(world, people, client):
    checked = {resolve(path.partition("?")[0]).url_name for path in pages(world)} | {"login"}
    client.force_login(people["admin"])
    left_out = []
    for pattern in console_urls.urlpatterns:
        if pattern.name in checked or pattern.name in NOT_PAGES:
            continue
        values = {
            name: ZERO_UUID if isinstance(converter, UUIDConverter) else "x"
            for name, converter in pattern.pattern.converters.items()
        }
        if client.get(reverse(pattern.name, kwargs=values)).status_code != 405:
            left_out.append(pattern.name)
    assert left_out == [], "pages no browser check visits"
    assert {"job_detail", "review_link"} <= checked


def signed_in(browser, live_server) -> dict:
    """The admin's session, signed in once through the login form: each
    page's context starts from its cookies instead of signing in again."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return context.storage_state()
    finally:
        context.close()


def check(browser, live_server, path, width, axe_source, session=None):
    context = browser.new_context(viewport={"width": width, "height": 900}, storage_state=session)
    context.set_default_timeout(15_000)
    page = context.new_page()
    problems = []

    def failed(request):
        # A request the browser itself abandoned (the next navigation, the
        # context closing) is not a failure of the page.
        if request.failure != "net::ERR_ABORTED":
            problems.append(f"request failed: {request.url} {request.failure}")

    try:
        page.on(
            "console", lambda msg: problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None
        )
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("requestfailed", failed)
        page.on(
            "response",
            lambda response: (
                problems.append(f"HTTP {response.status}: {response.url}") if response.status >= 400 else None
            ),
        )
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        overlaps = page.evaluate(OVERLAPPING_TEXT)
        page.evaluate(axe_source)
        violations = page.evaluate(SERIOUS_VIOLATIONS)
        if overlaps or violations or problems:
            # The route's name, and a digest of the path: a review link's token is too long for a file name.
            name = f"{resolve(path).url_name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
            page.screenshot(path=str(SCREENSHOTS / f"pages-{name}-{width}.png"), full_page=True)
        return {"overlapping text": overlaps, "accessibility": violations, "console and requests": problems}
    finally:
        context.close()


def test_every_page_at_desktop_and_phone_width_is_clean(browser, live_server, world, axe_source):
    found = {}
    session = signed_in(browser, live_server)
    for path in pages(world):
        for label, width in WIDTHS.items():
            result = {
                kind: items
                for kind, items in check(browser, live_server, path, width, axe_source, session).items()
                if items
            }
            if result:
                found[f"{path} at {width} px ({label})"] = result
    if found:
        (SCREENSHOTS / "pages-report.json").write_text(json.dumps(found, indent=1))
    assert not found, json.dumps(found, indent=1)[:6000]


def test_the_login_page_at_both_widths_is_clean(browser, live_server, people, axe_source):
    for width in WIDTHS.values():
        result = check(browser, live_server, "/login/", width, axe_source)
        assert not any(result.values()), result


def test_the_checks_catch_text_drawn_over_text(browser, live_server, people, axe_source):
    """The overlap check is not vacuous: a page whose labels sit on top of
    each other (as the dashboard's chart labels did) is caught."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    page = context.new_page()
    page.set_content(
        '<svg width="300" height="40"><text x="0" y="20">DEPENDENCY_UNAVAILABLE (3)</text>'
        '<text x="40" y="20">RATE_LIMITED (5)</text></svg>'
    )
    assert page.evaluate(OVERLAPPING_TEXT)
    page.set_content('<main><h1>Title</h1><img src="x.png"><button></button></main>')
    page.evaluate(axe_source)
    rules = {violation["rule"] for violation in page.evaluate(SERIOUS_VIOLATIONS)}
    assert {"image-alt", "button-name"} <= rules
    context.close()


def test_the_icon_is_served_and_favicon_ico_leads_to_it(client):
    found = client.get("/favicon.ico")
    assert found.status_code == 301 and found["Location"].endswith("favicon.svg")
