"""Signing in through the identity provider (docs/explanation/teams.md#teams).

An SSO account is found by the provider's (issuer, subject), never by a
username or email another account could share: a first sign-in makes a new
account (a free username), never takes over a local one. At every sign-in
the account's Django groups (roles, `global`, reviewer groups of action
policies) and team memberships become exactly what OIDC_ROLE_MAP and
OIDC_TEAM_MAP yield for the provider's groups, so a person removed from a
group there loses what it gave here at their next sign-in; the policy
recheck before each attempt then no longer counts their approvals. A role
holder whom OIDC_TEAM_MAP gives no team gets OIDC_DEFAULT_TEAM, or no team
at all (never `default` by omission: fail closed). Each sign-in is one
`user.signed_in` audit event naming what changed.

With a provider-verified email in OIDC_LINK_EMAIL_DOMAINS, the account is
grouped as one person with the one active local account of that email, for
four-eyes only (workflows.persons): the link gives no sign-in, role or team.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from workflows import persons
from workflows.audit import identity as requester
from workflows.audit import journal
from workflows.models import ProviderIdentity, Team
from workflows.operations import persons as person_links

MAX_GROUPS = 500  # more than any sane directory hands one person; the rest are ignored


def provider_groups(claims: dict) -> list[str]:
    """The groups claim (OIDC_GROUPS_CLAIM) as a list of names: a list of
    strings, or one string; anything else counts as no groups."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({item for item in value if isinstance(item, str) and item})[:MAX_GROUPS]


def mapped(group_map: dict[str, list[str]], groups: list[str]) -> set[str]:
    """The names whose provider groups include one of `groups`."""
    held = set(groups)
    return {name for name, wanted in group_map.items() if held.intersection(wanted)}


def sign_in(*, issuer: str, subject: str, claims: dict):
    """The account of this provider identity, made on the first sign-in, with
    its groups and teams set from the maps."""
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                return _sign_in(issuer, subject, claims)
        except IntegrityError:  # the same person's first sign-in in two tabs at once
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _sign_in(issuer: str, subject: str, claims: dict):
    groups = provider_groups(claims)
    link = (
        ProviderIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    first = link is None
    if first:
        user = _new_account(claims, subject)
        link = ProviderIdentity.objects.create(user=user, issuer=issuer, subject=subject, groups=groups)
    else:
        user = link.user
        link.groups, link.signed_in_at = groups, timezone.now()
        link.save(update_fields=["groups", "signed_in_at"])
    # From here on, this request acts as that person, at that provider.
    requester.update(username=user.get_username(), subject=subject, issuer=issuer, token="")
    roles = sorted(mapped(settings.OIDC_ROLE_MAP, groups))
    teams = sorted(mapped(settings.OIDC_TEAM_MAP, groups))
    if roles and not teams and settings.OIDC_DEFAULT_TEAM:
        teams = [settings.OIDC_DEFAULT_TEAM]
    had_roles = set(user.groups.values_list("name", flat=True))
    had_teams = set(user.teams.values_list("name", flat=True))
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in roles])
    user.teams.set([Team.objects.get_or_create(name=name)[0] for name in teams])
    user._role_cache = None
    journal.append(
        actor=user,
        verb="user.signed_in",
        obj_type="user",
        obj_id=user.pk,
        data={
            "via": "oidc",
            "first": first,
            "provider_groups": groups,
            "roles": roles,
            "teams": teams,
            "roles_added": sorted(set(roles) - had_roles),
            "roles_removed": sorted(had_roles - set(roles)),
            "teams_added": sorted(set(teams) - had_teams),
            "teams_removed": sorted(had_teams - set(teams)),
        },
    )
    _link_by_email(user, claims)
    return user


def _link_by_email(user, claims: dict) -> None:
    """Group the SSO account with the local account of its email when the
    provider vouches for the address and its domain is one we trust for
    that; none or several local accounts with it: no link."""
    email = claims.get("email")
    if claims.get("email_verified") is not True or not isinstance(email, str) or email.count("@") != 1:
        return
    if email.rsplit("@", 1)[1].lower() not in settings.OIDC_LINK_EMAIL_DOMAINS:
        return
    local = list(
        get_user_model()
        .objects.filter(
            email__iexact=email,
            is_active=True,
            provider_identity__isnull=True,
            agent_owner__isnull=True,
        )
        .exclude(pk=user.pk)[:2]
    )
    if len(local) == 1 and not persons.same(user, local[0]):
        person_links.link(user, local[0], by=user, via="sso-email")


def _new_account(claims: dict, subject: str):
    """A new account with a free username from the provider's name for the person."""
    User = get_user_model()
    email = claims.get("email") if isinstance(claims.get("email"), str) else ""
    wanted = next(
        (
            value
            for value in (claims.get("preferred_username"), email, subject)
            if isinstance(value, str) and value.strip()
        ),
        subject,
    )
    base = re.sub(r"[^\w.@+-]", "-", wanted.strip())[:140] or "sso-user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    user = User(username=name, email=email[:254] if "@" in email else "")
    user.set_unusable_password()
    user.save()
    return user
