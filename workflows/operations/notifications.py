"""Tell reviewers that a plan awaits them: email, and optionally a webhook.

Runs as a queued task after the submission commits, so a slow mail server
never slows an agent's submission, and a failure here never loses the plan.
"""

import logging
from datetime import timedelta

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mass_mail
from django.db import transaction
from django.utils import timezone

from workflows import roles
from workflows.audit import journal
from workflows.engine import policy
from workflows.models import Workflow
from workflows.operations import links
from workflows.states import WorkflowStatus

log = logging.getLogger(__name__)
RISK_ORDER = ["LOW", "MEDIUM", "HIGH"]


def workflow_url(workflow: Workflow) -> str:
    return f"{settings.CONSOLE_URL}/workflows/{workflow.pk}/"


def reviewers_for(workflow: Workflow):
    return (
        get_user_model().objects.filter(is_active=True, groups__name=roles.REVIEWERS)
        .exclude(pk=workflow.submitted_by_id).distinct().order_by("pk")
    )


def notify_reviewers(workflow_id) -> int:
    workflow = Workflow.objects.select_related("submitted_by").filter(pk=workflow_id).first()
    if workflow is None or workflow.status != WorkflowStatus.PLANNED:
        return 0  # decided (or gone) before the notice went out: nothing to say
    link = workflow_url(workflow)
    subject = f"Plan awaiting your review: {workflow.name}"[:200].replace("\n", " ")
    risks = policy.policies_for({step["action"] for step in workflow.plan})
    risk = max((risks[step["action"]].risk for step in workflow.plan), key=RISK_ORDER.index)
    left = max(workflow.deadline - timezone.now(), timedelta(0))
    about = (
        f"{workflow.submitted_by.get_username()} submitted a plan with {len(workflow.plan)} step(s), "
        f"{risk} risk:\n" + "".join(f"  {n}. {step['action']} ({step['key']})\n" for n, step in
                                    enumerate(workflow.plan, 1))
        + f"Plan hash: {workflow.plan_hash} (revision {workflow.revision})\n"
        f"Time left to decide: {_duration(left)}\n\nReview it: {link}\n"
    )
    reviewers = list(reviewers_for(workflow))
    # Each reviewer's own one-click links: bound to them, this revision, and used once.
    own = {user.pk: {decision: links.url(links.make(workflow, user, decision)) for decision in links.DECISIONS}
           for user in reviewers}
    mails = [(subject, about + f"\nOr decide from here (you confirm on the page that opens):\n"
                              f"  Approve: {own[user.pk]['approve']}\n  Reject:  {own[user.pk]['reject']}\n",
              None, [user.email]) for user in reviewers if user.email]
    sent = send_mass_mail(mails, fail_silently=False)
    hook = settings.REVIEW_WEBHOOK_URL
    if hook:
        # Shaped for a chat message with two buttons per reviewer; only ever
        # to the reviewers' own channel, never to the agent (its callback
        # carries the workflow alone).
        payload = {"event": "plan.awaiting_review", "workflow_id": str(workflow.pk), "name": workflow.name,
                   "url": link, "risk": risk, "revision": workflow.revision,
                   "deadline": workflow.deadline.isoformat(), "text": about,
                   "reviewers": [{"username": user.get_username(),
                                  "actions": [{"label": "Approve", "url": own[user.pk]["approve"]},
                                              {"label": "Reject", "url": own[user.pk]["reject"]}]}
                                 for user in reviewers]}
        try:
            requests.post(hook, json=payload, timeout=5)
        except requests.RequestException as exc:
            log.warning("review webhook failed: %s", type(exc).__name__)
    with transaction.atomic():
        journal.append(actor="system", verb="reviewers.notified", obj_type="workflow", obj_id=workflow.pk,
                     workflow_id=workflow.pk, data={"emails": sent, "webhook": bool(hook)})
    return sent


def _duration(left: timedelta) -> str:
    minutes = int(left.total_seconds() // 60)
    days, hours, minutes = minutes // 1440, minutes % 1440 // 60, minutes % 60
    return " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or "under a minute"
