"""Linking a Slack user to a console account
(docs/explanation/chat-decisions.md#the-handshake): by a handshake, or by
hand (`manage.py person link-slack`), never by a chat profile (an email in a
Slack profile proves nothing about who holds the console account).

The handshake: an unlinked Slack user's first click answers, to them alone,
with a signed console URL (10 minutes, usable once) naming their Slack user;
the person signs in to the console there and confirms. Whoever confirms
holds the console account; only that Slack user was shown the URL.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse

from workflows.audit import journal
from workflows.errors import DomainError
from workflows.models import SlackIdentity, UsedSlackLink

SALT = "durableconsole.slack-link"
MAX_AGE_SECONDS = 600
SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,31}")


class SlackLinkRefused(DomainError):
    code = "link_refused"
    status = 403


@dataclass(frozen=True)
class Handshake:
    team: str
    slack_user: str
    slack_name: str
    nonce: str


def linked_user(team: str, slack_user: str):
    """The account a Slack user decides as; None while unlinked."""
    row = SlackIdentity.objects.select_related("user").filter(team=team, slack_user=slack_user).first()
    return row.user if row is not None else None


def make_token(team: str, slack_user: str, slack_name: str) -> str:
    return signing.dumps({"t": team, "u": slack_user, "n": slack_name[:80], "x": uuid.uuid4().hex}, salt=SALT)


def url(token: str) -> str:
    return f"{settings.CONSOLE_URL}{reverse('slack_link', kwargs={'token': token})}"


def check(token: str) -> Handshake:
    """The handshake a token offers; SlackLinkRefused with what to do
    otherwise. Reads only."""
    try:
        claims = signing.loads(token, salt=SALT, max_age=MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise SlackLinkRefused(
            "This link has expired (it lasts 10 minutes): click in Slack again for a new one."
        ) from None
    except signing.BadSignature:
        raise SlackLinkRefused("This link is not valid: it was changed, or it is not one of ours.") from None
    if not isinstance(claims, dict) or not all(isinstance(claims.get(k), str) for k in "tunx"):
        raise SlackLinkRefused("This link is not valid: click in Slack again for a new one.")
    if claims["t"] != settings.SLACK_TEAM_ID:
        raise SlackLinkRefused("This link is for another Slack workspace than this console's.")
    if UsedSlackLink.objects.filter(nonce=claims["x"]).exists():
        raise SlackLinkRefused("This link was used already: each link links once.")
    return Handshake(team=claims["t"], slack_user=claims["u"], slack_name=claims["n"], nonce=claims["x"])


def confirm(token: str, user) -> Handshake:
    """The signed-in person confirms: their account and the token's Slack
    user are linked, the token used, in one transaction (audited)."""
    handshake = check(token)
    with transaction.atomic():
        try:
            with transaction.atomic():
                UsedSlackLink.objects.create(nonce=handshake.nonce, slack_user=handshake.slack_user, user=user)
        except IntegrityError:
            raise SlackLinkRefused("This link was used already: each link links once.") from None
        if SlackIdentity.objects.filter(team=handshake.team, slack_user=handshake.slack_user).exists():
            raise SlackLinkRefused("This Slack user is linked already. An administrator can change it by hand.")
        if SlackIdentity.objects.filter(team=handshake.team, user=user).exists():
            raise SlackLinkRefused(
                "Your account is linked to another Slack user already. An administrator can change it by hand."
            )
        _link(handshake.team, handshake.slack_user, user, by=user, via=SlackIdentity.Via.HANDSHAKE)
    return handshake


def link_by_hand(user, slack_user: str, *, by=None) -> str | None:
    """`manage.py person link-slack`: link (or move) a Slack user of the one
    workspace to `user`. The Slack user it replaces for that account, if any."""
    team = settings.SLACK_TEAM_ID
    if not team:
        raise SlackLinkRefused("SLACK_TEAM_ID is unset: there is no Slack workspace to link in.")
    if not SLACK_USER.fullmatch(slack_user):
        raise SlackLinkRefused(f"{slack_user!r} is not a Slack user id (U… or W…).")
    with transaction.atomic():
        before = SlackIdentity.objects.select_for_update().filter(team=team, user=user).first()
        SlackIdentity.objects.filter(team=team, slack_user=slack_user).delete()
        if before is not None:
            before.delete()
        _link(team, slack_user, user, by=by, via=SlackIdentity.Via.MANUAL, before=before)
    return before.slack_user if before is not None and before.slack_user != slack_user else None


def _link(team: str, slack_user: str, user, *, by, via: str, before=None) -> None:
    SlackIdentity.objects.create(team=team, slack_user=slack_user, user=user, via=via)
    journal.append(
        actor=by,
        verb="person.slack_linked",
        obj_type="user",
        obj_id=user.pk,
        data={
            "account": user.get_username(),
            "slack_user": slack_user,
            "team": team,
            "via": via,
            "before": before.slack_user if before is not None else None,
        },
    )
