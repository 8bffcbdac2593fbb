"""API bearer tokens: shown once, stored only as a SHA-256 hash."""

import secrets

from django.utils import timezone

from workflows import teams
from workflows.db import sha256_hex
from workflows.models import ApiToken

PREFIX = "dc_"


def _hash(token: str) -> str:
    return sha256_hex(token)


def issue(user, name: str = "", team=None) -> str:
    """A new token of `user` for `team`: the plans submitted with it belong
    to that team (docs/explanation/teams.md#teams). None: the user's team if they are a member
    of exactly one, else `default` (`manage.py issue_token` names one)."""
    if team is None:
        only = list(user.teams.all()[:2])
        team = only[0] if len(only) == 1 else teams.default_team()
    token = PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name, prefix=token[:10], token_hash=_hash(token), team=team)
    return token


def authenticate(token: str):
    """The active user the token belongs to, or None. The token row rides
    on the user as `api_token`: a submission takes its team from it."""
    if not token or len(token) > 200:
        return None
    row = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=_hash(token), revoked_at__isnull=True, suspended_at__isnull=True, user__is_active=True)
        .first()
    )
    if row is None:
        return None
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    row.user.api_token = row
    return row.user


def revoke(user, prefix: str | None = None) -> int:
    tokens = ApiToken.objects.filter(user=user, revoked_at__isnull=True)
    if prefix:
        tokens = tokens.filter(prefix=prefix[:10])
    return tokens.update(revoked_at=timezone.now())


def submitting_team(user):
    """The team a plan submitted by `user` belongs to: that of the token it
    came with (`tokens.authenticate`); without one (in code), that of the
    user's newest active token, else `default`."""
    token = getattr(user, "api_token", None)
    if token is None:
        token = (
            ApiToken.objects.filter(user=user, revoked_at__isnull=True)
            .select_related("team")
            .order_by("-created_at", "-pk")
            .first()
        )
    return token.team if token is not None else teams.default_team()
