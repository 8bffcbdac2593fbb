"""Tell reviewers that a plan awaits them: email, and optionally a webhook.

Runs as a queued task after the submission commits, so a slow mail server
never slows an agent's submission, and a failure here never loses the plan.
"""

import logging

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mass_mail
from django.db import transaction

from workflows import roles
from workflows.audit import journal
from workflows.models import Workflow
from workflows.states import WorkflowStatus

log = logging.getLogger(__name__)


def workflow_url(workflow: Workflow) -> str:
    return f"{settings.CONSOLE_URL}/workflows/{workflow.pk}/"


def reviewers_for(workflow: Workflow):
    return (
        get_user_model().objects.filter(is_active=True, groups__name=roles.REVIEWERS)
        .exclude(pk=workflow.submitted_by_id).exclude(email="").distinct().order_by("pk")
    )


def notify_reviewers(workflow_id) -> int:
    workflow = Workflow.objects.select_related("submitted_by").filter(pk=workflow_id).first()
    if workflow is None or workflow.status != WorkflowStatus.PLANNED:
        return 0  # decided (or gone) before the notice went out: nothing to say
    link = workflow_url(workflow)
    subject = f"Plan awaiting your review: {workflow.name}"[:200].replace("\n", " ")
    body = (
        f"{workflow.submitted_by.get_username()} submitted a plan with {len(workflow.plan)} step(s).\n"
        f"Plan hash: {workflow.plan_hash}\n\nReview it: {link}\n"
    )
    recipients = [user.email for user in reviewers_for(workflow)]
    sent = send_mass_mail([(subject, body, None, [email]) for email in recipients], fail_silently=False)
    hook = settings.REVIEW_WEBHOOK_URL
    if hook:
        try:
            requests.post(hook, json={"event": "plan.awaiting_review", "workflow_id": str(workflow.pk),
                                      "name": workflow.name, "url": link}, timeout=5)
        except requests.RequestException as exc:
            log.warning("review webhook failed: %s", type(exc).__name__)
    with transaction.atomic():
        journal.append(actor="system", verb="reviewers.notified", obj_type="workflow", obj_id=workflow.pk,
                     workflow_id=workflow.pk, data={"emails": sent, "webhook": bool(hook)})
    return sent
