"""Tell reviewers that a plan awaits them (email, and optionally a
webhook), remind them before its review deadline, escalate after it.

Each notice is a row written with the plan (`ReviewNotice`) and sent by a
queued task after the submission commits, so a slow mail server never
slows an agent's submission, and a failure here never loses the plan. The
task takes no arguments: any one of them sends every notice due, so the
queue drops the surplus of a burst's wake-ups (`workflows.queue.WAKE_UPS`).
"""

import logging
import time
from datetime import timedelta

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mass_mail
from django.db import connection, transaction
from django.utils import timezone

from workflows import roles, teams
from workflows.audit import journal
from workflows.engine import policy
from workflows.models import ReviewNotice, Workflow
from workflows.operations import delegation, links
from workflows.states import PreviewState, WorkflowStatus

log = logging.getLogger(__name__)
RISK_ORDER = ["LOW", "MEDIUM", "HIGH"]


def workflow_url(workflow: Workflow) -> str:
    return f"{settings.CONSOLE_URL}/workflows/{workflow.pk}/"


def reviewers_for(workflow: Workflow):
    """The reviewers who may approve the plan: of its team, and in every
    reviewer group its actions' policies, or its team's Cedar policies, name."""
    people = get_user_model().objects.filter(
        teams.members_q(workflow.team_id), is_active=True, groups__name=roles.REVIEWERS
    )
    for group in sorted(policy.reviewer_groups(policy.plan_rules(workflow))):
        people = people.filter(pk__in=get_user_model().objects.filter(groups__name=group).values("pk"))
    return people.exclude(pk=workflow.submitted_by_id).distinct().order_by("pk")


def _reviewers(workflow: Workflow) -> tuple[list, dict]:
    """Who a plan's notices go to: its reviewers, each who is away replaced by
    their delegate where the delegate is one of them too
    (docs/explanation/review.md#delegation); and who was replaced by whom."""
    eligible = reviewers_for(workflow)
    return delegation.route(list(eligible), eligible)


def notify_reviewers(workflow_id) -> int:
    """Send one plan's first notice now, if it has not gone out; the number
    of emails sent. (The queued task of a plan submitted before first
    notices were rows: its row is written here.)"""
    with transaction.atomic():
        if not ReviewNotice.objects.filter(workflow_id=workflow_id, kind=ReviewNotice.Kind.NOTICE).exists():
            workflow = Workflow.objects.filter(pk=workflow_id).first()
            if workflow is None:
                return 0
            ReviewNotice.objects.create(
                workflow=workflow, kind=ReviewNotice.Kind.NOTICE, due_at=workflow.created_at, deadline=workflow.deadline
            )
        notice = _take(ReviewNotice.objects.filter(workflow_id=workflow_id, kind=ReviewNotice.Kind.NOTICE))
        return _settle(notice).get("emails", 0) if notice is not None else 0


def _notify(workflow: Workflow) -> dict:
    """The first notice: each reviewer's email with their own links, and
    the optional webhook; what to record of it."""
    link = workflow_url(workflow)
    subject = f"Plan awaiting your review: {workflow.name}"[:200].replace("\n", " ")
    risk, about = _about(workflow, workflow.deadline)
    reviewers, delegated = _reviewers(workflow)
    own = _links(workflow, reviewers)
    sent = send_mass_mail(_mails(subject, about, reviewers, own), fail_silently=False)
    hook = settings.REVIEW_WEBHOOK_URL
    if hook:
        # Shaped for a chat message with two buttons per reviewer; only ever
        # to the reviewers' own channel, never to the agent (its callback
        # carries the workflow alone).
        payload = {
            "event": "plan.awaiting_review",
            "workflow_id": str(workflow.pk),
            "name": workflow.name,
            "url": link,
            "risk": risk,
            "revision": workflow.revision,
            "deadline": workflow.deadline.isoformat(),
            "text": about,
            "reviewers": [
                {
                    "username": user.get_username(),
                    "actions": [
                        {"label": "Approve", "url": own[user.pk]["approve"]},
                        {"label": "Reject", "url": own[user.pk]["reject"]},
                    ],
                }
                for user in reviewers
            ],
        }
        try:
            requests.post(hook, json=payload, timeout=5)
        except requests.RequestException as exc:
            log.warning("review webhook failed: %s", type(exc).__name__)
    return {"emails": sent, "webhook": bool(hook), **({"delegated": delegated} if delegated else {})}


def _about(workflow: Workflow, until) -> tuple[str, str]:
    """(risk, text) of a notice: the plan, its risk, what each step will do
    (its preview where a worker took one) and the time left until `until`."""
    risks = policy.policies_for({step["action"] for step in workflow.plan})
    risk = max((risks[step["action"]].risk for step in workflow.plan), key=RISK_ORDER.index)
    previews = dict(
        workflow.steps.filter(lane=0, preview_state=PreviewState.READY).values_list("key", "preview__summary")
    )
    left = max(until - timezone.now(), timedelta(0))
    text = (
        f"“{workflow.name}”: {workflow.submitted_by.get_username()} submitted a plan "
        f"with {len(workflow.plan)} step(s), {risk} risk:\n"
        + "".join(
            f"  {n}. {step['action']} ({step['key']})"
            + (f": {previews[step['key']]}" if previews.get(step["key"]) else "")
            + "\n"
            for n, step in enumerate(workflow.plan, 1)
        )
        + f"Plan hash: {workflow.plan_hash} (revision {workflow.revision})\n"
        f"Time left to decide: {_duration(left)}\n\nReview it: {workflow_url(workflow)}\n"
    )
    return risk, text


def _links(workflow: Workflow, reviewers) -> dict:
    """Each reviewer's own one-click links: bound to them, this revision, and used once."""
    return {
        user.pk: {decision: links.url(links.make(workflow, user, decision)) for decision in links.DECISIONS}
        for user in reviewers
    }


def _mails(subject: str, about: str, reviewers, own: dict) -> list[tuple]:
    return [
        (
            subject,
            about + "\nOr decide from here (you confirm on the page that opens):\n"
            f"  Approve: {own[user.pk]['approve']}\n  Reject:  {own[user.pk]['reject']}\n",
            None,
            [user.email],
        )
        for user in reviewers
        if user.email
    ]


def any_due() -> bool:
    return ReviewNotice.objects.filter(sent_at__isnull=True, due_at__lte=timezone.now()).exists()


# How long one notices task keeps sending, at most: it ends well inside the
# task timeout (a quarter of Q_TIMEOUT); what is still due is taken by the
# next (the worker loop asks `any_due`).
BUDGET_SECONDS = 20.0


def send_due(budget: float | None = None) -> int:
    """Send the notices that came due, each once: a notice's row is taken
    with SKIP LOCKED and marked sent in the transaction that sends it, so
    clusters sweeping at once never both send one. (A process killed
    between the mail and the commit sends it again: once more, never lost.)
    First notices of plans decided before theirs went out are settled
    first, a thousand in three statements, unsent and with no audit event
    (`_moot`): a burst of plans approved while no worker ran costs a few
    statements, not a task per plan. Returns the notices settled."""
    if budget is None:
        budget = min(BUDGET_SECONDS, settings.Q_CLUSTER["timeout"] / 4)
    settled = _moot()
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        with transaction.atomic():
            notice = _take(ReviewNotice.objects.filter(sent_at__isnull=True, due_at__lte=timezone.now()))
            if notice is None:
                break
            _settle(notice)
        settled += 1
    return settled


def _moot() -> int:
    """Settle the first notices of plans no longer awaiting review, a batch
    at a time while batches are full. Three statements a batch, each read
    through an index whatever the planner's statistics say: the due
    notices (`review_notice_due`), their plans by key, the notices by key."""
    settled = 0
    while True:
        now = timezone.now()
        due = list(
            ReviewNotice.objects.filter(sent_at__isnull=True, due_at__lte=now)
            .order_by("due_at")
            .values_list("pk", "workflow_id", "kind")[:MOOT_BATCH]
        )
        plans = {workflow_id for _, workflow_id, kind in due if kind == ReviewNotice.Kind.NOTICE}
        decided = set(
            Workflow.objects.filter(pk__in=plans).exclude(status=WorkflowStatus.PLANNED).values_list("pk", flat=True)
        )
        moot = [pk for pk, workflow_id, kind in due if kind == ReviewNotice.Kind.NOTICE and workflow_id in decided]
        if moot:
            settled += ReviewNotice.objects.filter(pk__in=moot, sent_at__isnull=True).update(sent_at=now, outcome=MOOT)
        if len(due) < MOOT_BATCH or not moot:
            return settled


MOOT = "not sent: the plan was decided first"
MOOT_BATCH = 1000


def _take(notices) -> ReviewNotice | None:
    """The oldest unsent of `notices`, locked for this transaction; one that
    another transaction holds is passed over."""
    due = notices.filter(sent_at__isnull=True).order_by("due_at")
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True, of=("self",))
    return due.select_related("workflow__submitted_by").first()


def _settle(notice: ReviewNotice) -> dict:
    """Send a taken notice (inside its transaction), mark it sent, and
    record it; what was recorded. A first notice whose plan was decided
    meanwhile is settled unsent, with no audit event, as `_moot` does."""
    if notice.kind == ReviewNotice.Kind.NOTICE:
        if notice.workflow.status != WorkflowStatus.PLANNED:
            notice.outcome, data = MOOT, None
        else:
            data = _notify(notice.workflow)
            notice.outcome = f"{data['emails']} reviewer(s) told"
        verb = "reviewers.notified"
    else:
        notice.outcome, delegated = _send(notice)
        data = {
            "due_at": notice.due_at.isoformat(),
            "outcome": notice.outcome,
            **({"delegated": delegated} if delegated else {}),
        }
        verb = f"reviewers.{notice.kind.lower()}"
    notice.sent_at = timezone.now()
    notice.save(update_fields=["sent_at", "outcome"])
    if data is not None:
        journal.append(
            actor="system",
            verb=verb,
            obj_type="workflow",
            obj_id=notice.workflow_id,
            workflow_id=notice.workflow_id,
            data=data,
        )
    return data or {}


def _send(notice: ReviewNotice) -> tuple[str, dict]:
    """A reminder or an escalation: (outcome, `{away: delegate}` of those
    whose delegate was told instead)."""
    workflow = notice.workflow
    waiting = (WorkflowStatus.PLANNED, WorkflowStatus.WAITING_GATE) if notice.at_expiry else (WorkflowStatus.PLANNED,)
    if workflow.status not in waiting:
        return f"not sent: the plan is {workflow.status}", {}
    review_deadline = notice.deadline
    if notice.kind == ReviewNotice.Kind.REMINDER:
        _, about = _about(workflow, review_deadline)
        reviewers, delegated = _reviewers(workflow)
        subject = f"Reminder: plan awaiting your review: {workflow.name}"[:200].replace("\n", " ")
        sent = send_mass_mail(_mails(subject, about, reviewers, _links(workflow, reviewers)), fail_silently=False)
        return f"{sent} reviewer(s) reminded", delegated
    group = notice.group
    if not group:
        return "not sent: the plan names no escalation group", {}
    _, about = _about(workflow, workflow.deadline)
    # Only the group's people of the plan's team: the plan is no one else's to
    # see. One away is replaced by their delegate, who must be of the team too.
    may_see = (
        get_user_model()
        .objects.filter(teams.members_q(workflow.team_id), is_active=True)
        .exclude(pk=workflow.submitted_by_id)
        .exclude(email="")
        .distinct()
        .order_by("pk")
    )
    told, delegated = delegation.route(list(may_see.filter(groups__name=group)), may_see)
    subject, body = _escalation(notice, about)
    sent = send_mass_mail([(subject, body, None, [user.email]) for user in told], fail_silently=False)
    return f"{sent} member(s) of {group} told", delegated


def _escalation(notice: ReviewNotice, about: str) -> tuple[str, str]:
    """(subject, body) of an escalation: the review deadline passed, or the
    plan's own and it was extended (docs/explanation/review.md#on-expiry)."""
    workflow = notice.workflow
    if not notice.at_expiry:
        subject = f"Escalation: plan not reviewed in time: {workflow.name}"
        body = (
            f"Nobody decided this plan by its review deadline ({notice.deadline:%Y-%m-%d %H:%M} UTC); it expires "
            f"at {workflow.deadline:%Y-%m-%d %H:%M} UTC.\n\n{about}"
        )
    else:
        where = "at a gate" if workflow.status == WorkflowStatus.WAITING_GATE else "for review"
        subject = f"Escalation: plan past its deadline, extended: {workflow.name}"
        body = (
            f"This plan waited {where} until its deadline ({notice.due_at:%Y-%m-%d %H:%M} UTC) with nobody "
            f"deciding. It was escalated to you and its deadline extended to {notice.deadline:%Y-%m-%d %H:%M} "
            f"UTC; then it expires.\n\n{about}"
        )
    return subject[:200].replace("\n", " "), body


def _duration(left: timedelta) -> str:
    minutes = int(left.total_seconds() // 60)
    days, hours, minutes = minutes // 1440, minutes % 1440 // 60, minutes % 60
    return " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or "under a minute"
