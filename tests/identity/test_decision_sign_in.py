"""Every decision made through a session needs a sign-in younger than
DECISION_MAX_AUTH_AGE (docs/explanation/decisions.md#bound-decisions; one hour by default): older, the console
decides nothing and asks the person to sign in again, then sends them back
to the page they decided from. Review links check it themselves
(test_review_links.py); the API takes bearer tokens, not sessions."""

import inspect
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Group, User
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.desk import free_port
from tests.support.failing import fail_next_step
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.resolving import READ_BY_NEXT, READ_BY_NONE, SAW, in_doubt
from tests.support.running import run_job, run_until
from tests.support.seeing import Client, previews_taken
from workflows import roles
from workflows.engine import binding, execution, gates
from workflows.models import (
    ActionPolicy,
    AuditEvent,
    Compensation,
    DeadLetter,
    Job,
    PolicyChange,
    PolicySetVersion,
    StandingGrant,
    Step,
    Workflow,
)
from workflows.operations import bulk, compensation, grants, plans, policies, resolution
from workflows.operations.deciding import Seen
from workflows.web import urls as console_urls
from workflows.web.auth import SIGNED_IN_AT
from workflows.webhooks import delivery as webhook_delivery
from workflows.webhooks import endpoints as webhook_endpoints

# POST routes that decide nothing: who handles a plan, previews, a preview
# of a bulk replay, a check of the audit chain; and the review link, which
# checks the sign-in on its own page.
# `review_link` decides, and checks the sign-in's age in its view (its GET
# must stay open to a stale sign-in); the provider's back-channel logout
# comes server to server, with no session.
NOT_DECISIONS = {
    "login",
    "logout",
    "workflow_claim",
    "workflow_release",
    "workflow_assign",
    "workflow_retake_previews",
    "dead_letter_bulk_preview",
    "audit_verify",
    "review_link",
    "oidc_backchannel_logout",
    # Slack's own POST (signed, no session), and linking a Slack user, which decides nothing.
    "slack_interactions",
    # Evaluating a plan against the live policies changes nothing.
    "policy_playground",
    "slack_link",
    # Handing one's notices over while away moves attention, never the right
    # to decide (docs/explanation/review.md#delegation).
    "delegation",
    "delegation_end",
}


@pytest.fixture(autouse=True)
def mail_to_files(settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)


@pytest.fixture
def operator2(people):
    user = User.objects.create_user("operator2", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    return user


# --- the objects each decision is about -----------------------------------------------


def _planned(people):
    """A plan awaiting review, its previews taken (as a worker does after submission)."""
    workflow = plans.submit(people["agent"], ticket_plan("planned")).workflow
    previews_taken(workflow.pk)
    return workflow


def _failed(people):
    """A noop that completed, then a ticket the desk refused: a dead letter."""
    body = {
        "name": "half done",
        "submission_key": "failed",
        "steps": [
            {"key": "first", "action": "noop", "args": {}},
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
        ],
    }
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer2"])
    execution.execute(execution.claim(workflow.pk))
    fail_next_step(workflow.pk, "HTTP 400")
    workflow.refresh_from_db()
    return workflow


def _dead(people):
    return DeadLetter.objects.get(workflow=_failed(people))


def _dead_delivery(people):
    """The events of a plan that failed, to an endpoint nobody listens on: dead after one try."""
    endpoint, _ = webhook_endpoints.create(by=people["operator"], url=f"http://127.0.0.1:{free_port()}/hook")
    _failed(people)
    with override_settings(WEBHOOK_MAX_ATTEMPTS=1):
        for job in webhook_delivery.claim():
            webhook_delivery.record(webhook_delivery.send(job))
    return endpoint.deliveries.filter(status="DEAD").first()


def _at_gate(people):
    body = {
        "name": "gated",
        "submission_key": "gated",
        "steps": [
            {"key": "first", "action": "noop", "args": {}},
            {"key": "second", "action": "noop", "args": {}, "gate": {"approvals": 1, "note": "look first"}},
        ],
    }
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer2"])
    run_until(workflow.pk, "WAITING_GATE")
    return workflow


def _requested(people):
    return compensation.request(_failed(people), by=people["operator"], reason="undo")


def _job(people, paused=False):
    job, _ = bulk.reconcile(people["operator"], {"ids": [_dead(people).pk]}, shown_filter={}, dry_run=False)
    if paused:
        bulk.pause(job, by=people["operator"])
    return job


def _loosening(people):
    policies.change("noop", by=people["operator"], reason="tighten", changes={"enabled": False})
    return policies.change("noop", by=people["operator"], reason="loosen", changes={"enabled": True}).request


def _policy_form(rules, **changes):
    values = {
        "risk": rules.risk,
        "approvals_required": rules.approvals_required,
        "approval_ttl_seconds": rules.approval_ttl_seconds or "",
        "max_attempts": rules.max_attempts,
        "max_in_flight": rules.max_in_flight or "",
        "rate_per_second": rules.rate_per_second or "",
        "version": rules.version,
        "reason": "because",
        **({"enabled": "on"} if rules.enabled else {}),
        **({"chat_decisions": "on"} if rules.chat_decisions else {}),
    }
    return {**values, **changes}


def _detail(workflow):
    return reverse("workflow_detail", kwargs={"workflow_id": workflow.pk})


def _decision(name, people):
    """(persona, path, data, page the person is sent back to) of one decision."""
    if name in ("workflow_approve", "workflow_reject"):
        workflow = _planned(people)
        return (
            "reviewer",
            reverse(name, args=[workflow.pk]),
            {"comment": "ok", "revision": workflow.revision, "plan_hash": workflow.plan_hash},
            _detail(workflow),
        )
    if name == "decide_several":
        workflow = _planned(people)
        seen = Seen.current(workflow)
        suffix = f"-{workflow.pk}"
        return (
            "reviewer",
            reverse(name),
            {
                "decision": "approve",
                "workflow": [str(workflow.pk)],
                f"revision{suffix}": seen.revision,
                f"plan_hash{suffix}": seen.plan_hash,
                f"previews_shown{suffix}": "1",
                f"preview{suffix}": [f"{key}={digest}" for key, digest in seen.preview_digests.items()],
            },
            reverse("inbox"),
        )
    if name == "workflow_revise":
        workflow = _planned(people)
        return (
            "reviewer",
            reverse(name, args=[workflow.pk]),
            {
                "open:title": "Printer on fire, floor 4",
                "open:body": "Floor 3",
                "note:ticket_id": '{"$from": "open.result.id"}',
                "note:body": "Extinguisher on its way",
                "close:ticket_id": '{"$from": "open.result.id"}',
                "comment": "wrong floor",
                "revision": workflow.revision,
            },
            reverse(name, args=[workflow.pk]),
        )
    if name == "workflow_cancel":
        workflow = _failed(people)
        return "operator", reverse(name, args=[workflow.pk]), {"reason": "stop"}, _detail(workflow)
    if name in ("gate_approve", "gate_reject"):
        workflow = _at_gate(people)
        digest = gates.results_digest(Step.objects.get(workflow=workflow, key="second"))
        return (
            "reviewer",
            reverse(name, args=[workflow.pk, "second"]),
            {"comment": "ok", "results_digest": digest, "revision": workflow.revision, "plan_hash": workflow.plan_hash},
            _detail(workflow),
        )
    if name == "step_resolve":
        step = in_doubt(people, READ_BY_NONE)
        return (
            "operator",
            reverse(name, args=[step.workflow_id, step.key]),
            {"decision": "not_happened", "reason": "not in the mail log"},
            _detail(step.workflow),
        )
    if name == "step_resolve_confirm":
        step = resolution.resolve(in_doubt(people, READ_BY_NEXT), by=people["operator"], **SAW)
        return (
            "reviewer",
            reverse(name, args=[step.workflow_id, step.key]),
            {"reason": "seen in the relay", "resolution_digest": step.proposal_digest()},
            _detail(step.workflow),
        )
    if name == "compensation_request":
        workflow = _failed(people)
        return (
            "operator",
            reverse(name, args=[workflow.pk]),
            {"steps": ["first"], "reason": "undo"},
            reverse(name, args=[workflow.pk]),
        )
    if name in ("compensation_authorize", "compensation_decline"):
        comp = _requested(people)
        return (
            "reviewer",
            reverse(name, args=[comp.pk]),
            {"reason": "ok", "plan_hash": binding.compensation_hash(comp.plan)},
            reverse("compensation_detail", args=[comp.pk]),
        )
    if name in ("dead_letter_replay", "dead_letter_discard"):
        dead = _dead(people)
        return (
            "operator",
            reverse(name, args=[dead.pk]),
            {"reason": "fixed"},
            reverse("dead_letter_detail", args=[dead.pk]),
        )
    if name in ("dead_letter_bulk_replay", "dead_letter_reconcile"):
        return (
            "operator",
            reverse(name),
            {"ids": [str(_dead(people).pk)], "reason": "fixed"},
            reverse("dead_letter_list"),
        )
    if name in ("job_pause", "job_resume"):
        job = _job(people, paused=name == "job_resume")
        return "operator", reverse(name, args=[job.pk]), {}, reverse("job_detail", args=[job.pk])
    if name == "job_replay":
        job = run_job(_job(people).pk)
        return (
            "operator",
            reverse(name, args=[job.pk]),
            {"only": "all", "reason": "fixed"},
            reverse("job_detail", args=[job.pk]),
        )
    if name == "policy_detail":
        path = reverse(name, args=["noop"])
        return "operator", path, _policy_form(policies.get("noop", reader=people["operator"]), max_in_flight="3"), path
    if name in ("policy_change_authorize", "policy_change_decline"):
        change = _loosening(people)
        return "operator2", reverse(name, args=[change.pk]), {"reason": "ok"}, reverse("policy_detail", args=["noop"])
    if name == "policy_set_detail":
        path = reverse(name, args=["default"])
        return "operator", path, {"text": '@id("a")\nforbid(principal, action, resource) when { false };'}, path
    if name == "grant_list":
        until = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        form = {"agent": "agent", "action": "ticket.create", "when": "true", "max_uses": "3", "until": until}
        return "reviewer", reverse(name), form, reverse(name)
    if name in ("grant_authorize", "grant_revoke"):
        # ticket.comment cannot be undone: its grant waits for a second reviewer.
        grant = grants.create(
            people["reviewer"],
            agent="agent",
            action="ticket.comment" if name == "grant_authorize" else "ticket.create",
            when="true",
            max_uses=3,
            until=timezone.now() + timedelta(days=1),
        )
        return "reviewer2", reverse(name, args=[grant.pk]), {"reason": "ok"}, reverse("grant_list")
    if name == "webhook_delivery_replay":
        dead = _dead_delivery(people)
        return (
            "operator",
            reverse(name, args=[dead.pk]),
            {"reason": "the receiver is back"},
            reverse("webhook_delivery_detail", args=[dead.pk]),
        )
    raise AssertionError(f"no decision set up for {name}")


DECISIONS = [
    "workflow_approve",
    "workflow_reject",
    "decide_several",
    "workflow_revise",
    "workflow_cancel",
    "gate_approve",
    "gate_reject",
    "step_resolve",
    "step_resolve_confirm",
    "compensation_request",
    "compensation_authorize",
    "compensation_decline",
    "dead_letter_replay",
    "dead_letter_discard",
    "dead_letter_bulk_replay",
    "dead_letter_reconcile",
    "job_pause",
    "job_resume",
    "job_replay",
    "policy_detail",
    "policy_change_authorize",
    "policy_change_decline",
    "policy_set_detail",
    "grant_list",
    "grant_authorize",
    "grant_revoke",
    "webhook_delivery_replay",
]


def _state() -> tuple:
    """Everything a decision changes: each writes an audit event, and these rows."""
    return (
        AuditEvent.objects.count(),
        Job.objects.count(),
        sorted(Workflow.objects.values_list("status", "revision")),
        sorted(Step.objects.values_list("status")),
        sorted(DeadLetter.objects.values_list("status")),
        sorted(Job.objects.values_list("status")),
        sorted(Compensation.objects.values_list("status")),
        sorted(PolicyChange.objects.values_list("status")),
        sorted(PolicySetVersion.objects.values_list("version")),
        sorted(ActionPolicy.objects.values_list("action", "version")),
        sorted(Step.objects.exclude(proposed_resolution=None).values_list("key")),
        sorted(StandingGrant.objects.values_list("status")),
    )


def _signed_in(client, seconds_ago: int) -> None:
    session = client.session
    session[SIGNED_IN_AT] = int(time.time()) - seconds_ago
    session.save()


@pytest.mark.parametrize("name", DECISIONS)
def test_a_decision_with_a_sign_in_older_than_the_limit_decides_nothing(name, people, operator2, desk, settings):
    persona, path, data, back = _decision(name, {**people, "operator2": operator2})
    client = Client()
    client.force_login(people[persona] if persona in people else operator2)
    _signed_in(client, settings.DECISION_MAX_AUTH_AGE + 60)
    before = _state()

    refused = client.post(path, data)
    assert refused.status_code == 302
    assert refused["Location"] == f"/login/?{urlencode({'next': back, 'reauth': '1'})}"
    assert _state() == before
    page = client.get(refused["Location"]).content.decode()
    assert "Sign in again to decide: a decision needs a sign-in from the last hour." in page

    # The same request, signed in a minute ago, decides: the refusal was the only obstacle.
    _signed_in(client, 60)
    decided = client.post(path, data)
    assert "/login/" not in decided.get("Location", ""), decided.status_code
    assert _state() != before


def test_every_console_post_that_decides_needs_a_recent_sign_in():
    """A new POST route is either one of the decisions above or named as not one."""
    posting = set()
    for pattern in console_urls.urlpatterns:
        if pattern.name in ("login", "logout"):
            continue
        source = inspect.getsource(pattern.callback)
        if "@require_POST" in source or re.search(r"require_http_methods\(\[[^]]*\"POST\"", source):
            posting.add(pattern.name)
            if pattern.name not in NOT_DECISIONS:
                assert "@needs_recent_sign_in" in source, pattern.name
    assert posting - NOT_DECISIONS == set(DECISIONS)


def test_a_form_page_needs_no_recent_sign_in(people, settings):
    """Only the POST decides: a stale sign-in still opens the forms."""
    workflow = _planned(people)
    client = Client()
    client.force_login(people["reviewer"])
    _signed_in(client, settings.DECISION_MAX_AUTH_AGE + 60)
    assert client.get(reverse("workflow_revise", args=[workflow.pk])).status_code == 200


def test_the_limit_is_an_hour_unless_set():
    environ = {k: v for k, v in os.environ.items() if k != "DECISION_MAX_AUTH_AGE"}
    code = "import django; django.setup(); from django.conf import settings; print(settings.DECISION_MAX_AUTH_AGE)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, "DJANGO_SETTINGS_MODULE": "durableconsole.settings", "DEBUG": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3600"
