"""A reviewer can read what they approve, on a phone as on a desktop: every
console page, as the persona who uses it, at 390 px and 1280 px in the
system Chromium, with data that strains a layout (unbroken values longer
than a screen, a long email body, JSON nested four deep, a revised plan, a
dead letter, a compensation, a bulk job, the audit trail). A page fails on
sideways scrolling, on a text box or a column of text only a few
characters wide, on a control (button, navigation link, "show all"
summary) smaller than a 44 px tap target at 390 px,
and the review page on an approve form that does not name the revision it
sends."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.chromium import SCREENSHOTS
from tests.support.personas import PASSWORD
from tests.support.running import run_until
from workflows import actions, tasks
from workflows.actions import ActionError
from workflows.engine import execution, outcomes, recovery
from workflows.models import DeadLetter, Workflow
from workflows.operations import bulk, compensation, links, plans, policies

pytestmark = [pytest.mark.browser, pytest.mark.once, pytest.mark.django_db(transaction=True)]

WIDTHS = (390, 1280)
TAP = 44  # px, each way: a fingertip's target (WCAG 2.5.5)
NARROWEST_BOX = 80  # px: about ten characters of the console's text

UNBROKEN = "INC-" + "0123456789abcdef" * 12  # 196 characters without a break opportunity
EMAIL_BODY = "\n\n".join(
    [
        f"Dear customer {n},\n\nWe are writing about your order. " + "The refund is on its way. " * 12
        for n in range(1, 7)
    ]
    + ["Details: https://billing.example.com/refunds/" + "r" * 240 + "?confirm=1"]
)
NESTED = {
    "customer": {
        "address": {"lines": ["Flat 4", "1 Long Street", UNBROKEN[:120]], "postcode": "AB1 2CD"},
        "a_key_that_is_long_and_has_no_spaces_in_it_at_all_whatsoever": {"deeper": {"deepest": UNBROKEN}},
    },
    "items": [{"sku": f"SKU-{n}", "quantity": n, "note": "fragile " * 10} for n in range(3)],
    "flags": {"priority": True, "ratio": 0.25, "none": None},
}

# What a page breaks, measured in the page: sideways scrolling (with the
# elements sticking out), text boxes too narrow to type in, text squeezed
# into a column a few characters wide, and (at a phone's width) controls
# smaller than a fingertip.
LAYOUT_PROBLEMS = """([tap, narrowest, phone]) => {
  const shown = (el) => {
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\\s+/).join(".") : "")
    + (el.name ? `[name=${el.name}]` : "") + (el.textContent ? ` "${el.textContent.trim().slice(0, 30)}"` : "");
  const found = {};
  const width = window.innerWidth;
  if (document.documentElement.scrollWidth > width) {
    const out = [];
    for (const el of document.body.querySelectorAll("*")) {
      if (shown(el) && el.getBoundingClientRect().right > width + 1
          && ![...el.children].some(c => c.getBoundingClientRect().right > width + 1)) out.push(name(el));
    }
    found.overflow = [`scrollWidth ${document.documentElement.scrollWidth} > ${width}`, ...out.slice(0, 8)];
  }
  const boxes = [];
  for (const el of document.querySelectorAll("input, textarea, select")) {
    if (["hidden", "checkbox", "radio"].includes(el.type) || !shown(el)) continue;
    const w = el.getBoundingClientRect().width;
    if (w < narrowest) boxes.push(`${name(el)}: ${Math.round(w)} px wide`);
  }
  if (boxes.length) found.narrow_text_boxes = boxes;
  const squeezed = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (node.textContent.replace(/\\s/g, "").length < 12 || !node.parentElement || !shown(node.parentElement)) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = [...range.getClientRects()].filter(r => r.width > 0);
    const lines = new Set(rects.map(r => Math.round(r.top))).size;
    const widest = Math.max(0, ...rects.map(r => r.width));
    if (lines >= 3 && widest < narrowest * 0.75) {
      squeezed.push(`${name(node.parentElement)}: ${lines} lines, ${Math.round(widest)} px wide`);
    }
  }
  if (squeezed.length) found.squeezed_text = squeezed.slice(0, 8);
  if (phone) {
    const small = [];
    const controls = "button, input[type=submit], input[type=button], nav a, header.top a, summary";
    for (const el of document.querySelectorAll(controls)) {
      if (!shown(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.width < tap - 0.5 || r.height < tap - 0.5) small.push(`${name(el)}: ${Math.round(r.width)}x${Math.round(r.height)}`);
    }
    if (small.length) found.small_tap_targets = small.slice(0, 12);
  }
  return found;
}"""

# The form that approves the plan: the revision it sends, in a hidden
# field and in words the reviewer sees next to the button.
APPROVE_FORM = """() => {
  const button = [...document.querySelectorAll("button[formaction], form[action] button")]
    .find(b => /\\/approve$/.test(b.getAttribute("formaction") || b.form.getAttribute("action")));
  if (!button) return null;
  const form = button.form;
  const hidden = form.querySelector("input[type=hidden][name=revision]");
  return {revision: hidden ? hidden.value : null, plan_hash: (form.querySelector("input[name=plan_hash]") || {}).value,
          text: form.innerText};
}"""


@pytest.fixture
def world(people, desk, settings, tmp_path):
    """Data that strains a layout on every page: a revised plan awaiting
    review whose args hold unbroken values, a long email and nested JSON,
    with previews taken; a failed run with a dead letter and a compensation
    awaiting its authorization; a run waiting at a gate; an email in doubt;
    a bulk job; a pending policy change."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)
    body = {
        "name": "Refund the customer and tell them " + UNBROKEN[:60],
        "submission_key": "layout-planned",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": UNBROKEN, "body": EMAIL_BODY}},
            {
                "key": "tell",
                "action": "email.send",
                "args": {
                    "to": [f"customer.{n}.with.a.long.address@subdomain.example.com" for n in range(4)],
                    "subject": "Your refund " + UNBROKEN[:80],
                    "body": EMAIL_BODY,
                },
            },
            {
                "key": "notify",
                "action": "http.post",
                "args": {"url": "https://hooks.example.com/" + "a" * 200, "json": NESTED},
            },
        ],
    }
    planned = plans.submit(people["agent"], body).workflow
    decide.revise(
        planned,
        by=people["reviewer2"],
        comment="Shorter subject, " + UNBROKEN[:40],
        steps=[
            {"key": "tell", "args": {**body["steps"][1]["args"], "subject": "Your refund <b>now</b>"}},
            {
                "key": "notify",
                "args": {
                    "url": "https://hooks.example.com/" + "b" * 200,
                    "json": {**NESTED, "flags": {"priority": False}},
                },
            },
        ],
    )
    tasks.compute_previews(str(planned.pk))

    failed_body = {
        "name": "half done",
        "submission_key": "layout-failed",
        "steps": [
            {
                "key": "first",
                "action": "ticket.create",
                "args": {"title": UNBROKEN},
                "compensation": {"action": "ticket.close", "args": {"ticket_id": {"$from": "first.result.id"}}},
            },
            {"key": "second", "action": "ticket.create", "args": {"title": "t", "body": EMAIL_BODY}},
        ],
    }
    failed = plans.submit(people["agent"], failed_body).workflow
    decide.approve(failed, by=people["reviewer2"])
    execution.execute(execution.claim(failed.pk))
    step = execution.claim(failed.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("PERMISSION_DENIED", "HTTP 403 " + UNBROKEN), step.fence
    )
    comp = compensation.request(Workflow.objects.get(pk=failed.pk), by=people["operator"], reason="undo " + UNBROKEN)
    job, _ = bulk.reconcile(people["operator"], {"workflow": failed.pk}, shown_filter={}, dry_run=True)
    policies.change(
        "ticket.create", by=people["operator"], reason="slow remote " + UNBROKEN, changes={"max_in_flight": 4}
    )
    dead = DeadLetter.objects.get(workflow=failed)

    gated = plans.submit(
        people["agent"],
        {
            "name": "Look before closing",
            "submission_key": "layout-gated",
            "steps": [
                {"key": "open", "action": "ticket.create", "args": {"title": UNBROKEN}},
                {
                    "key": "close",
                    "action": "ticket.close",
                    "args": {"ticket_id": {"$from": "open.result.id"}},
                    "gate": {"approvals": 1, "note": "Check " + UNBROKEN},
                },
            ],
        },
    ).workflow
    decide.approve(gated, by=people["reviewer2"])
    run_until(gated.pk, "WAITING_GATE")

    # An email whose worker died after the REQUESTED checkpoint: an operator resolves it.
    doubtful = plans.submit(
        people["agent"],
        {
            "name": "Tell them",
            "submission_key": "layout-doubt",
            "steps": [
                {
                    "key": "mail",
                    "action": "email.send",
                    "args": {"to": "ops@example.com", "subject": "s", "body": EMAIL_BODY},
                },
                {"key": "after", "action": "noop", "args": {}},
            ],
        },
    ).workflow
    decide.approve(doubtful, by=people["reviewer2"])
    step = execution.claim(doubtful.pk)
    execution._request_attempt(step, step.fence)
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    execution.run_workflow(doubtful.pk)
    assert Workflow.objects.get(pk=doubtful.pk).status == "NEEDS_ATTENTION"
    link = links.url(links.make(Workflow.objects.get(pk=planned.pk), people["reviewer"], "approve"))
    return {
        "planned": Workflow.objects.get(pk=planned.pk),
        "failed": failed.pk,
        "comp": comp.pk,
        "job": job.pk,
        "dead": dead.pk,
        "gated": gated.pk,
        "doubtful": doubtful.pk,
        "link": link.split("://", 1)[-1].partition("/")[2],
    }


def persona_pages(w) -> dict[str, list[str]]:
    planned = w["planned"].pk
    return {
        "reviewer": [
            "/",
            "/workflows/",
            f"/workflows/{planned}/",
            f"/workflows/{planned}/revise",
            "/compensations/",
            f"/compensations/{w['comp']}/",
            "/dashboard/",
            "/analytics/",
            f"/{w['link']}",
            f"/workflows/{w['gated']}/",
        ],
        "operator": [
            "/attention/",
            "/dead-letters/",
            f"/dead-letters/{w['dead']}/",
            f"/workflows/{w['failed']}/",
            f"/workflows/{w['failed']}/compensate",
            f"/workflows/{w['doubtful']}/",
            f"/jobs/{w['job']}/",
            "/actions/",
            "/actions/ticket.create/policy",
        ],
        "auditor": ["/audit/", "/dead-letters/", "/compensations/", "/actions/ticket.create/policy", "/analytics/"],
    }


# Pages that answer a form: the page, and the button that asks.
ANSWER_PAGES = {
    "auditor": ("/audit/", "Verify now (whole chain)"),
    "operator": ("/dead-letters/?action=ticket.create", "Preview replay of all matching"),
}


def log_in(browser, base_url, username, width):
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=base_url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
    return context, page


def problems_of(page, path: str, width: int) -> dict:
    found = page.evaluate(LAYOUT_PROBLEMS, [TAP, NARROWEST_BOX, width < 600])
    if found:
        name = (path.strip("/").replace("/", "_") or "inbox")[:60]
        page.screenshot(path=str(SCREENSHOTS / f"layout-{name}-{width}.png"), full_page=True)
    return found


def test_every_page_fits_a_phone_and_a_desktop_as_each_persona_sees_it(browser, live_server, world):
    found = {}
    for width in WIDTHS:
        for persona, paths in persona_pages(world).items():
            context, page = log_in(browser, live_server.url, persona, width)
            try:
                for path in paths:
                    page.goto(path)
                    assert page.title(), path  # a page, not an empty answer
                    if result := problems_of(page, path, width):
                        found[f"{path} as {persona} at {width} px"] = result
                if persona in ANSWER_PAGES:
                    path, button = ANSWER_PAGES[persona]
                    page.goto(path)
                    page.get_by_role("button", name=button).click()
                    page.wait_for_load_state("networkidle")
                    if result := problems_of(page, f"{path.partition('?')[0]}answer", width):
                        found[f"{button} on {path} as {persona} at {width} px"] = result
            finally:
                context.close()
        context = browser.new_context(viewport={"width": width, "height": 900}, base_url=live_server.url)
        page = context.new_page()
        page.goto("/login/")
        if result := problems_of(page, "login", width):
            found[f"/login/ at {width} px"] = result
        context.close()
    if found:
        (SCREENSHOTS / "layout-report.json").write_text(json.dumps(found, indent=1))
    assert not found, json.dumps(found, indent=1)[:8000]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_approve_form_names_the_revision_it_sends(browser, live_server, world, width):
    workflow = world["planned"]
    assert workflow.revision == 2  # edited once: the revision a stale page would not send
    context, page = log_in(browser, live_server.url, "reviewer", width)
    try:
        page.goto(f"/workflows/{workflow.pk}/")
        form = page.evaluate(APPROVE_FORM)
        assert form is not None, "no approve form"
        assert form["revision"] == "2" and form["plan_hash"] == workflow.plan_hash
        assert f"revision 2 (plan hash {workflow.plan_hash[:12]}" in form["text"].lower().replace("\n", " ")
        changed = page.get_by_test_id("changed-since")
        assert changed.is_visible()
        # The subject the editor wrote, beside the form, as text: an agent's or editor's markup stays escaped.
        assert '"Your refund <b>now</b>"' in changed.inner_text()
        assert changed.locator("b").count() == 0

        gated = Workflow.objects.get(pk=world["gated"])  # a gate's approval sends the revision too
        page.goto(f"/workflows/{gated.pk}/")
        form = page.evaluate(APPROVE_FORM)
        assert form["revision"] == "1" and form["plan_hash"] == gated.plan_hash
        assert f"revision 1 (plan hash {gated.plan_hash[:12]}" in form["text"].lower().replace("\n", " ")
    finally:
        context.close()


def test_the_layout_checks_catch_what_they_look_for(browser):
    """Not vacuous: a page that scrolls sideways, a text box four
    characters wide, a column of text wrapping letter by letter, a 20 px
    button and an approve form without its revision are each caught."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    page = context.new_page()
    page.set_content(
        '<div style="width:600px">wide</div>'
        '<input name="q" style="width:40px">'
        '<table><tr><td style="width:1px;word-break:break-all">abcdefghijklmnopqrstuvwxyz</td>'
        '<td style="width:100%">other</td></tr></table>'
        '<form action="/workflows/1/approve" method="post"><button style="height:20px">Approve</button>'
        "</form>"
    )
    found = page.evaluate(LAYOUT_PROBLEMS, [TAP, NARROWEST_BOX, True])
    assert set(found) == {"overflow", "narrow_text_boxes", "squeezed_text", "small_tap_targets"}, found
    assert "input[name=q]: 40 px wide" in found["narrow_text_boxes"]
    assert any("Approve" in item for item in found["small_tap_targets"])
    assert page.evaluate(APPROVE_FORM) == {"revision": None, "plan_hash": None, "text": "Approve"}
    page.set_content(
        '<p style="width:360px">' + "word " * 40 + '</p><input name="q">'
        '<button style="min-height:44px;min-width:44px">Go</button>'
    )
    assert page.evaluate(LAYOUT_PROBLEMS, [TAP, NARROWEST_BOX, True]) == {}
    context.close()
