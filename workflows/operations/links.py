"""Deciding from a link (docs/explanation/review.md#review): a reviewer's notice carries two signed
one-click links, approve and reject, each bound to that reviewer, the plan's
revision and hash, the decision and an expiry, and usable once.

Following a link never decides: chat apps and mail scanners fetch links
ahead of the person. It shows a confirmation page, and the decision is that
page's POST (CSRF, the usual four-eyes checks of `approvals`, and a sign-in
younger than DECISION_MAX_AUTH_AGE). A link is refused, with a clear reason
and no decision, when it was changed, has expired, was sent to someone
else, is for a revision that is no longer current, or was used already.
Links go only into reviewers' notices, never to the agent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from workflows.errors import DomainError
from workflows.models import UsedReviewLink, Workflow
from workflows.operations import approvals
from workflows.operations.deciding import Seen
from workflows.states import WorkflowStatus

SALT = "durableconsole.review-link"
DECISIONS = ("approve", "reject")
# A link never outlives its plan's deadline, nor this.
LONGEST = timedelta(days=7)


class LinkRefused(DomainError):
    code = "link_refused"
    status = 403


@dataclass
class Link:
    workflow: Workflow
    decision: str
    nonce: str
    expires: datetime
    # The revision and plan hash the link was made for: what it decides on.
    seen: Seen


def make(workflow: Workflow, reviewer, decision: str, now: datetime | None = None) -> str:
    """The signed token of one reviewer's one decision on this revision."""
    if decision not in DECISIONS:
        raise ValueError(decision)
    now = now or timezone.now()
    expires = min(workflow.deadline, now + LONGEST)
    return signing.dumps(
        {
            "w": str(workflow.pk),
            "r": reviewer.pk,
            "v": workflow.revision,
            "h": workflow.plan_hash,
            "d": decision,
            "n": uuid.uuid4().hex,
            "e": int(expires.timestamp()),
        },
        salt=SALT,
    )


def url(token: str) -> str:
    from django.conf import settings

    return f"{settings.CONSOLE_URL}{reverse('review_link', kwargs={'token': token})}"


def check(token: str, user, *, deciding_now: bool = False) -> Link:
    """The link's plan and decision, for `user`; LinkRefused with the reason
    a person can act on otherwise. Reads only: a GET may call it freely.
    `deciding_now`: the decision itself checks the plan's state and
    revision, under its lock, against those the link binds."""
    try:
        claims = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        raise LinkRefused(
            "This link is not valid: it was changed, or it is not one of ours. Open the plan from the console instead."
        ) from None
    if not isinstance(claims, dict) or claims.get("d") not in DECISIONS:
        raise LinkRefused("This link is not valid. Open the plan from the console instead.")
    expires = datetime.fromtimestamp(int(claims.get("e", 0)), tz=timezone.get_current_timezone())
    if expires <= timezone.now():
        raise LinkRefused("This link has expired. Open the plan from the console to decide it.")
    if claims.get("r") != user.pk:
        raise LinkRefused(
            "This link was sent to another reviewer: it cannot decide for you. Open the plan from "
            "the console to decide it yourself."
        )
    workflow = Workflow.objects.visible_to(user).select_related("submitted_by").filter(pk=claims.get("w")).first()
    if workflow is None:
        # Gone, or of a team that is not the reviewer's (any more): both are "no such plan".
        refused = LinkRefused("The plan of this link does not exist, or is not one of your teams' plans.")
        refused.status = 404
        raise refused
    if UsedReviewLink.objects.filter(nonce=claims.get("n")).exists():
        raise LinkRefused("This link was used already: each link decides once.")
    if not deciding_now:
        if claims.get("v") != workflow.revision or claims.get("h") != workflow.plan_hash:
            raise LinkRefused(
                f"The plan changed since this link was sent (it is now revision {workflow.revision}): "
                "review the current revision in the console."
            )
        if workflow.status != WorkflowStatus.PLANNED:
            raise LinkRefused(f"This plan is {workflow.status}: it no longer awaits a decision.")
    return Link(
        workflow=workflow,
        decision=claims["d"],
        nonce=claims["n"],
        expires=expires,
        seen=Seen(revision=claims.get("v"), plan_hash=claims.get("h")),
    )


def decide(token: str, user, *, comment: str = "", preview_digests: dict[str, str] | None = None) -> Link:
    """The confirmation page's POST: use the link once and decide, in one
    transaction (a refused decision leaves the link unused), on the revision
    and hash the link binds and the previews its page showed."""
    link = check(token, user, deciding_now=True)
    seen = Seen(revision=link.seen.revision, plan_hash=link.seen.plan_hash, preview_digests=preview_digests)
    with transaction.atomic():
        try:
            with transaction.atomic():
                UsedReviewLink.objects.create(
                    nonce=link.nonce, workflow=link.workflow, reviewer=user, decision=link.decision
                )
        except IntegrityError:
            raise LinkRefused("This link was used already: each link decides once.") from None
        if link.decision == "approve":
            approvals.approve(link.workflow, by=user, seen=seen, comment=comment)
        else:
            approvals.reject(link.workflow, by=user, seen=seen, comment=comment)
    return link
