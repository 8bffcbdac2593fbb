"""Exact previews (docs/explanation/decisions.md#bound-decisions): each built-in action with an effect shows,
in its preview, the request it will send, built by the code that sends it,
with secrets and results of earlier steps as named placeholders; the
approval's digest covers it; the worker builds it again before the effect
and sends nothing when it is not the approved template. What a receiver
gets is that template with only its placeholders filled."""

import hashlib
import json
from urllib.parse import urlsplit

import pytest
from django.core import mail

from durableconsole import proof
from tests.support.database import every_row_as_text
from tests.support.personas import PASSWORD
from tests.support.previewing import approve_shown, wait_for_previews
from tests.support.receiver import Receiver
from tests.support.running import run_until, wait_for_status
from tests.support.seeing import Client
from workflows import actions, tasks
from workflows.actions import Preview
from workflows.models import Approval, Attempt, AuditEvent, Step, Workflow
from workflows.operations import plans

HOOK_TOKEN = "hk_live_7d1c0b9a8f7e6d5c4b3a2f1e"
DESK_NOTE = "desk-note-0b1c2d3e4f5a6b7c"
# Headers the transport adds to every request, beside the action's own:
# the console's (operation key, approval proof, trace context) and the HTTP
# client's. Anything else a receiver gets must be in the template.
TRANSPORT_HEADERS = {
    "host",
    "content-length",
    "user-agent",
    "accept",
    "accept-encoding",
    "connection",
    "idempotency-key",
    "approval-proof",
    "traceparent",
    "tracestate",
}
OPEN = "{{from:open.result.id}}"


def template(request: dict) -> dict:
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {**request, "template_sha256": hashlib.sha256(canonical.encode()).hexdigest()}


def secrets_policy(*names, actions_=("http.post", "ticket.create", "ticket.comment")) -> dict:
    return {name: {"actions": list(actions_), "hosts": ["127.0.0.1"]} for name in names}


def hook_plan(url: str, key="exact") -> dict:
    return {
        "name": "Open a ticket and tell the hook",
        "submission_key": key,
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Printer", "body": {"$secret": "DESK_NOTE"}}},
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.id"}, "body": "On it <b>now</b>"},
            },
            {
                "key": "hook",
                "action": "http.post",
                "args": {
                    "url": url,
                    "headers": {"X-Hook-Token": {"$secret": "HOOK_TOKEN"}},
                    # A string that looks like a placeholder is the plan's text: sent as it is, never filled.
                    "json": {
                        "ticket": {"$from": "open.result.id"},
                        "token": {"$secret": "HOOK_TOKEN"},
                        "note": f"literal {OPEN} and secret:HOOK_TOKEN",
                        "tags": ["ü", 1.5, None],
                    },
                },
            },
        ],
    }


# --- what the preview shows ---------------------------------------------------------


def test_the_api_shows_the_request_template_of_each_built_in_action(api, desk, settings, monkeypatch):
    settings.SECRETS_POLICY = secrets_policy("HOOK_TOKEN", "DESK_NOTE")
    # This process could resolve them: the templates still name them only.
    monkeypatch.setenv("SECRET_HOOK_TOKEN", HOOK_TOKEN)
    monkeypatch.setenv("SECRET_DESK_NOTE", DESK_NOTE)
    url = "https://127.0.0.1:9/hooks/deploy?env=prod"
    plan = hook_plan(url)
    plan["steps"] += [
        {"key": "close", "action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
        {
            "key": "mail",
            "action": "email.send",
            "args": {
                "to": ["ops@example.com"],
                "cc": "boss@example.com",
                "subject": "Ticket opened",
                "body": {"$from": "open.result.status"},
            },
        },
        {"key": "mark", "action": "noop", "args": {"n": 1}},
    ]
    submitted = api["agent"].post("/workflows", plan)
    assert submitted.status_code == 201, submitted.json()
    workflow_id = submitted.json()["id"]
    tasks.compute_previews(workflow_id)

    shown = {step["key"]: step["preview"] for step in api["reviewer"].get(f"/workflows/{workflow_id}").json()["steps"]}
    json_headers = {"Content-Type": "application/json"}
    assert {key: preview["request"] for key, preview in shown.items()} == {
        "open": template(
            {
                "method": "POST",
                "url": f"{desk.url}/tickets",
                "headers": json_headers,
                "body": '{"body":secret:DESK_NOTE,"title":"Printer"}',
            }
        ),
        "note": template(
            {
                "method": "POST",
                "url": f"{desk.url}/tickets/{OPEN}/comments",
                "headers": json_headers,
                "body": '{"body":"On it <b>now</b>"}',
            }
        ),
        "hook": template(
            {
                "method": "POST",
                "url": url,
                "headers": {**json_headers, "X-Hook-Token": "secret:HOOK_TOKEN"},
                "body": f'{{"note":"literal {OPEN} and secret:HOOK_TOKEN","tags":["ü",1.5,null],'
                f'"ticket":{OPEN},"token":secret:HOOK_TOKEN}}',
            }
        ),
        "close": template({"method": "POST", "url": f"{desk.url}/tickets/{OPEN}/close", "headers": {}, "body": ""}),
        "mail": template(
            {
                "from": settings.DEFAULT_FROM_EMAIL,
                "to": ["ops@example.com"],
                "cc": ["boss@example.com"],
                "subject": "Ticket opened",
                "body": "{{from:open.result.status}}",
            }
        ),
        "mark": None,
    }
    # Every step with a request has a preview to approve, `$from` or not, and its digest covers the request.
    assert {key: preview["state"] for key, preview in shown.items()} == {
        "open": "READY",
        "note": "READY",
        "hook": "READY",
        "close": "READY",
        "mail": "READY",
        "mark": "NONE",
    }
    for preview in shown.values():
        if preview["request"] is not None:
            assert preview["digest"] == Preview(preview["summary"], preview["details"], preview["request"]).digest
            assert preview["digest"] != Preview(preview["summary"], preview["details"]).digest
    # A step whose args take results of earlier steps shows its template alone; the others keep their own preview.
    assert (shown["note"]["summary"], shown["note"]["details"]) == (f"POST {desk.url}/tickets/{OPEN}/comments", {})
    assert shown["open"]["summary"] == "Create a ticket “Printer” on the desk at 127.0.0.1"
    assert HOOK_TOKEN not in json.dumps(shown) and DESK_NOTE not in json.dumps(shown)


def test_the_review_page_shows_the_request_escaped(api, people, desk, settings):
    settings.SECRETS_POLICY = secrets_policy("HOOK_TOKEN", "DESK_NOTE")
    plan = hook_plan("https://127.0.0.1:9/hook")
    plan["steps"][2]["args"]["headers"]["items"] = "<i>x</i>"  # a header name that is also a dict method
    workflow = plans.submit(people["agent"], plan).workflow
    tasks.compute_previews(str(workflow.pk))
    browser = Client()
    assert browser.login(username="reviewer", password=PASSWORD)
    page = browser.get(f"/workflows/{workflow.pk}/").content.decode()
    assert page.count('data-testid="preview-request"') == 3
    assert f"POST {desk.url}/tickets/{OPEN}/comments" in page
    assert "X-Hook-Token: secret:HOOK_TOKEN" in page and "items: &lt;i&gt;x&lt;/i&gt;" in page
    assert "On it &lt;b&gt;now&lt;/b&gt;" in page and "<b>now</b>" not in page


def test_what_is_sent_is_the_template_filled_whatever_the_values():
    """The request built from resolved args is, byte for byte, the template
    built from the args as submitted with each placeholder filled: a value
    of any JSON type, in a body, a header or a URL path."""
    hook, comment = actions.get("http.post"), actions.get("ticket.comment")
    values = {
        "open.result.id": {"nested": ["ü", 2, None, {"a": True}]},
        "TOKEN": 'quote " and \\ back',
        "open.result.n": 42,
    }

    def value_of(reference):
        return values[reference.get("$from") or reference.get("$secret")]

    def resolved(value):
        if isinstance(value, dict) and set(value) in ({"$from"}, {"$secret"}):
            return value_of(value)
        if isinstance(value, dict):
            return {key: resolved(item) for key, item in value.items()}
        if isinstance(value, list):
            return [resolved(item) for item in value]
        return value

    cases = [
        (
            hook,
            {
                "url": "https://127.0.0.1:9/h",
                "headers": {"Authorization": {"$secret": "TOKEN"}},
                "json": [
                    {"$from": "open.result.id"},
                    {"deep": {"$secret": "TOKEN"}, "n": {"$from": "open.result.n"}},
                    "{{from:open.result.id}}",
                ],
            },
        ),
        (hook, {"url": "https://127.0.0.1:9/h", "json": {"$from": "open.result.id"}}),
        (comment, {"ticket_id": {"$from": "open.result.n"}, "body": {"$secret": "TOKEN"}}),
    ]
    for action, args in cases:
        sent = action.request(resolved(args)).sent()
        assert action.request(args).fill(value_of) == sent
        # Built from the args as submitted, no value is in it.
        assert 'quote \\" and' not in json.dumps(action.request(args).shown())
    assert sent["url"].endswith("/tickets/42/comments")


def test_a_plan_that_names_its_own_content_type_sends_only_that_one():
    shown = (
        actions.get("http.post")
        .request({"url": "https://127.0.0.1:9/h", "headers": {"content-type": "text/plain"}, "json": {}})
        .shown()
    )
    assert shown["headers"] == {"content-type": "text/plain"}


# --- what a receiver gets --------------------------------------------------------------


@pytest.mark.live
def test_the_receivers_get_the_approved_template_with_only_its_placeholders_filled(api, start_worker, desk):
    policy = secrets_policy("HOOK_TOKEN", "DESK_NOTE")
    with Receiver() as receiver:
        from django.conf import settings

        settings.SECRETS_POLICY = policy
        submitted = api["agent"].post("/workflows", hook_plan(f"{receiver.url}/deploy?env=prod"))
        assert submitted.status_code == 201, submitted.json()
        workflow_id = submitted.json()["id"]
        start_worker(SECRETS_POLICY=json.dumps(policy), SECRET_HOOK_TOKEN=HOOK_TOKEN, SECRET_DESK_NOTE=DESK_NOTE)
        wait_for_previews(workflow_id)
        approved = {
            step["key"]: step["preview"]["request"]
            for step in api["reviewer"].get(f"/workflows/{workflow_id}").json()["steps"]
        }
        approve_shown(api["reviewer"], workflow_id)
        wait_for_status(workflow_id, "COMPLETE")
        [got] = receiver.requests

    ticket_id = Step.objects.get(workflow_id=workflow_id, key="open").result["id"]
    hook = approved["hook"]
    # The body: the approved text with its two placeholders filled, and nothing else changed.
    expected = (
        hook["body"]
        .replace(f'"ticket":{OPEN}', f'"ticket":{ticket_id}', 1)
        .replace('"token":secret:HOOK_TOKEN', f'"token":{json.dumps(HOOK_TOKEN)}', 1)
    )
    assert expected != hook["body"] and got["body"] == expected.encode()
    assert json.loads(got["body"])["note"] == f"literal {OPEN} and secret:HOOK_TOKEN"
    assert got["path"] == urlsplit(hook["url"]).path + "?" + urlsplit(hook["url"]).query
    # The headers: the template's, filled, and only the transport's besides.
    own = {name.lower(): value for name, value in hook["headers"].items()}
    assert {name: got["headers"][name] for name in own} == {
        "content-type": "application/json",
        "x-hook-token": HOOK_TOKEN,
    }
    assert set(got["headers"]) - set(own) <= TRANSPORT_HEADERS
    assert got["headers"]["idempotency-key"] == Step.objects.get(workflow_id=workflow_id, key="hook").operation_key

    # The desk: the paths and bodies of the approved templates, filled.
    ledger = [(entry["method"], entry["path"]) for entry in desk.ledger()]
    assert ledger == [
        ("POST", urlsplit(approved["open"]["url"]).path),
        ("POST", urlsplit(approved["note"]["url"].replace(OPEN, str(ticket_id))).path),
    ]
    ticket = desk.ticket(ticket_id)
    assert (ticket["title"], ticket["body"]) == ("Printer", DESK_NOTE)
    assert [comment["body"] for comment in ticket["comments"]] == [json.loads(approved["note"]["body"])["body"]]

    # No hash of a request with its secrets in is ever stored.
    rows = every_row_as_text()
    assert HOOK_TOKEN not in rows and DESK_NOTE not in rows
    assert hashlib.sha256(got["body"]).hexdigest() not in rows


# --- refused when it is not the approved template -----------------------------------------


def test_a_request_is_not_approved_before_its_preview_so_the_worker_always_checks_it(api, people, settings):
    """Approving before the preview exists would bind no template: the
    worker would have none to compare and would send whatever it builds."""
    plan = {
        "name": "Tell ops",
        "submission_key": "unseen",
        "steps": [
            {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "Hi", "body": "On it"}}
        ],
    }
    workflow = plans.submit(api["agent"].user, plan).workflow
    console = Client()
    assert console.login(username="reviewer2", password=PASSWORD)

    early = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"preview_digests": {}})
    page = console.post(f"/workflows/{workflow.pk}/approve", {"previews_shown": "1"}, follow=True)

    assert early.status_code == 409
    error = early.json()["error"]
    assert (error["code"], error["step"], error["preview_state"]) == ("preview_pending", "mail", "PENDING")
    assert "Step mail (email.send) cannot be approved before its preview exists" in page.content.decode()
    assert not Approval.objects.exists()
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb__startswith="workflow.approv").exists()
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"

    tasks.compute_previews(str(workflow.pk))
    approved = approve_shown(api["reviewer"], workflow.pk)
    step = Step.objects.get(workflow=workflow)
    assert approved == {"mail": step.preview_digest}
    assert Approval.objects.get(workflow=workflow).preview_digests == approved
    # The worker builds the request again and compares: another sender is not the approved message.
    settings.DEFAULT_FROM_EMAIL = "someone-else@example.com"
    run_until(workflow.pk, "FAILED")
    step = Step.objects.get(pk=step.pk)
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert mail.outbox == [] and not Attempt.objects.filter(step=step).exists()
    (blocked,) = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked")
    [problem] = blocked.data["problems"]
    assert problem.startswith("the request it would send is not the one approved: approved mail from ")


def test_a_stored_template_rewritten_after_approval_is_refused_and_nothing_is_sent(api, desk, settings):
    with Receiver() as receiver, Receiver() as elsewhere:
        plan = {
            "name": "Tell the hook",
            "submission_key": "tamper",
            "steps": [{"key": "hook", "action": "http.post", "args": {"url": receiver.url, "json": {"deploy": "v2"}}}],
        }
        workflow = plans.submit(api["agent"].user, plan).workflow
        tasks.compute_previews(str(workflow.pk))
        approved = approve_shown(api["reviewer"], workflow.pk)
        # A database writer points the stored template elsewhere, its own
        # SHA-256 and the step's digest column rewritten to match.
        step = Step.objects.get(workflow=workflow)
        forged = {key: value for key, value in step.preview["request"].items() if key != "template_sha256"}
        forged["url"] = elsewhere.url
        preview = Preview(step.preview["summary"], step.preview["details"], template(forged))
        Step.objects.filter(pk=step.pk).update(preview=preview.as_json(), preview_digest=preview.digest)
        assert Step.objects.get(pk=step.pk).preview["request"]["url"] == elsewhere.url  # the rewrite landed

        run_until(workflow.pk, "FAILED")
        assert receiver.requests == [] and elsewhere.requests == []

    step = Step.objects.get(pk=step.pk)
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert not Attempt.objects.filter(step=step).exists()
    (blocked,) = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked")
    assert blocked.data["problems"] == [
        (
            f"the approved preview (digest {approved['hook'][:12]}…) is no longer on record: its request cannot be "
            "checked before it is sent"
        )
    ]


@pytest.mark.live
def test_a_worker_that_would_build_another_request_refuses_until_the_new_one_is_approved(
    api, start_worker, desk, tmp_path
):
    """The previews were taken against the desk at 127.0.0.1; the worker
    that runs the plan is configured with another address for it (the same
    desk, so a request sent would land): it refuses, and the desk's ledger
    stays empty until a reviewer approves the request it would now send."""
    workflow = plans.submit(
        api["agent"].user,
        {
            "name": "Open a ticket",
            "submission_key": "moved",
            "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "Printer", "body": "Floor 3"}}],
        },
    ).workflow
    tasks.compute_previews(str(workflow.pk))
    approved = approve_shown(api["reviewer"], workflow.pk)
    moved = desk.url.replace("127.0.0.1", "localhost")
    start_worker(TICKET_DESK_URL=moved)
    wait_for_status(workflow.pk, "FAILED")

    step = Step.objects.get(workflow=workflow)
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert desk.ledger() == []
    assert not Attempt.objects.filter(step=step).exists()
    (blocked,) = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked")
    [problem] = blocked.data["problems"]
    assert problem.startswith(
        f"the request it would send is not the one approved: approved POST {desk.url}/tickets "
        f"(template {step.preview['request']['template_sha256'][:12]}…), now POST {moved}/tickets"
    )

    # A reviewer has the preview taken again by that worker, and approves what it would now send.
    assert api["reviewer"].post(f"/workflows/{workflow.pk}/previews/retake").status_code == 200
    wait_for_previews(workflow.pk)
    assert Step.objects.get(pk=step.pk).preview["request"]["url"] == f"{moved}/tickets"
    reapproved = approve_shown(api["reviewer2"], workflow.pk)
    assert reapproved["open"] != approved["open"]
    wait_for_status(workflow.pk, "COMPLETE")
    assert [(entry["method"], entry["path"]) for entry in desk.ledger()] == [("POST", "/tickets")]


def test_mail_is_the_approved_message_filled_and_a_changed_sender_is_refused(api, desk, settings):
    plan = {
        "name": "Open and tell",
        "submission_key": "mail",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Printer"}},
            {
                "key": "mail",
                "action": "email.send",
                "args": {"to": "ops@example.com", "subject": "Opened", "body": {"$from": "open.result.status"}},
            },
        ],
    }
    sent = plans.submit(api["agent"].user, plan).workflow
    tasks.compute_previews(str(sent.pk))
    approve_shown(api["reviewer"], sent.pk)
    approved = Step.objects.get(workflow=sent, key="mail").preview["request"]
    run_until(sent.pk, "COMPLETE")
    [message] = mail.outbox
    # The approved text, its placeholder filled, each line ended as SMTP carries it (what the proof covers).
    assert (message.from_email, message.to, message.cc, message.subject, message.body) == (
        approved["from"],
        approved["to"],
        approved["cc"],
        approved["subject"],
        proof.mail_body(approved["body"].replace("{{from:open.result.status}}", "open")),
    )

    refused = plans.submit(api["agent"].user, {**plan, "submission_key": "mail-2"}).workflow
    tasks.compute_previews(str(refused.pk))
    approve_shown(api["reviewer"], refused.pk)
    settings.DEFAULT_FROM_EMAIL = "someone-else@example.com"
    run_until(refused.pk, "FAILED")
    step = Step.objects.get(workflow=refused, key="mail")
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert len(mail.outbox) == 1  # the first plan's message only
    assert Workflow.objects.get(pk=refused.pk).steps.get(key="open").status == "COMPLETE"
