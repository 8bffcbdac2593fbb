"""Which teams a user's work belongs to (docs/explanation/teams.md#teams).

A person sees, decides and replays only within their teams: the teams they
are a member of, or `default` for a local account in a role group that is a
member of none. An SSO account's teams are exactly what the provider's
groups map to (workflows.operations.identity): with none, it has no team
and sees no team's work (fail closed). Superusers, and auditors in the `global` group, see every team. Every
query that shows or changes team work starts from the user through the
`visible_to(user)` queryset methods in `workflows.models`, which use these.

A request that came with an API token reads as that token's team alone
(docs/explanation/decisions.md#bound-decisions), whoever holds it: `token_team_id` narrows `is_global` and
`team_ids` here, once, for every read and decision made through it.
"""

from django.apps import apps
from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from workflows import roles

DEFAULT = "default"


def default_team():
    """The `default` team, created if a flushed database lost it. (The model
    is looked up, not imported: `workflows.models` builds on this module.)"""
    return apps.get_model("workflows", "Team").objects.get_or_create(name=DEFAULT)[0]


def default_team_id() -> int:
    # Only the key is read: migrations call this (as a field default) while
    # the table still lacks columns that later ones add.
    pk = apps.get_model("workflows", "Team").objects.filter(name=DEFAULT).values_list("pk", flat=True).first()
    return pk if pk is not None else default_team().pk


def token_team_id(user) -> int | None:
    """The team of the API token this request came with
    (`tokens.authenticate`), or None without one (the console, code)."""
    token = getattr(user, "api_token", None)
    return token.team_id if token is not None else None


def _global_person(user) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    return user.is_superuser or (roles.is_auditor(user) and roles.has_role(user, roles.GLOBAL))


def is_global(user) -> bool:
    """Sees every team: a superuser, or an auditor in the `global` group,
    unless through a token, which reads its own team's work alone."""
    return _global_person(user) and token_team_id(user) is None


def is_staff_role(user) -> bool:
    """A reviewer, operator or auditor (or a superuser): a person, not an agent."""
    return bool(
        user.is_authenticated
        and user.is_active
        and (user.is_superuser or any(roles.has_role(user, role) for role in roles.ALL))
    )


def team_ids(user) -> set[int]:
    """The ids of the teams whose work this person sees (cached on the user
    object for the request); empty for an agent or an anonymous user.
    Through a token, at most the token's team: a global person's token
    reads that team, anyone else's only if they are one of its people."""
    if not is_staff_role(user):
        return set()
    token_team = token_team_id(user)
    if token_team is None:
        return _person_team_ids(user)
    return {token_team} if _global_person(user) or token_team in _person_team_ids(user) else set()


def _person_team_ids(user) -> set[int]:
    cache = getattr(user, "_team_cache", None)
    if cache is None:
        # One query: the user's teams, `default` in case they have none, and
        # whether the account is the provider's (then none means none).
        Team = apps.get_model("workflows", "Team")
        mine = Team.members.through.objects.filter(team=OuterRef("pk"), user=user.pk)
        sso = apps.get_model("workflows", "ProviderIdentity").objects.filter(user=user.pk)
        rows = list(
            Team.objects.filter(Q(Exists(mine)) | Q(name=DEFAULT))
            .annotate(member=Exists(mine), sso=Exists(sso))
            .values_list("pk", "member", "sso")
        )
        cache = {pk for pk, member, _ in rows if member}
        if not cache and not (rows[0][2] if rows else is_sso(user)):
            cache = {pk for pk, _, _ in rows} or {default_team_id()}
        user._team_cache = cache
    return cache


def token_team(user, path: str = "") -> dict:
    """For anyone who came with a token: only its team's objects, their own
    included (the filter on the team key reached through `path`)."""
    team = token_team_id(user)
    return {f"{path}team_id": team} if team is not None else {}


def is_sso(user) -> bool:
    """An account of the identity provider (its teams come from OIDC_TEAM_MAP only)."""
    return apps.get_model("workflows", "ProviderIdentity").objects.filter(user_id=user.pk).exists()


def in_team(user, team_id: int) -> bool:
    return is_global(user) or team_id in team_ids(user)


def members_q(team_id: int) -> Q:
    """Users of the team, as a filter on users: its members, and for
    `default` also local accounts in no team. (Global users are not listed: they
    see every team, they are no team's reviewers.)"""
    q = Q(teams__id=team_id)
    if team_id == default_team_id():
        q |= Q(teams__isnull=True, provider_identity__isnull=True)
    return q


def members_of_q(team_ids: set[int]) -> Q:
    """Users of any of these teams, as a filter on users, in the same SQL
    (no query of its own): `members_q` for several teams at once."""
    Team = apps.get_model("workflows", "Team")
    return Q(teams__id__in=team_ids) | (
        Q(teams__isnull=True, provider_identity__isnull=True)
        & Q(Exists(Team.objects.filter(pk__in=team_ids, name=DEFAULT)))
    )


def eligible_group(group: str, team_id: int) -> bool:
    """Whether a group may be told about a plan of this team (an agent's
    `review.escalate_to`): some active member of the team is in it. Only
    those members are told (workflows.operations.notifications)."""
    users = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    return users.objects.filter(members_q(team_id), is_active=True, groups__name=group).exists()
