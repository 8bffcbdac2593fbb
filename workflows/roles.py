"""Roles are plain Django groups; membership is all it takes."""

from collections import defaultdict

from django.contrib.auth import get_user_model

REVIEWERS = "reviewers"
OPERATORS = "operators"
AUDITORS = "auditors"
ALL = (REVIEWERS, OPERATORS, AUDITORS)
# Auditors in this group see every team (so do superusers); it gives
# nothing to anyone else (docs/explanation/teams.md#teams, `workflows.teams`).
GLOBAL = "global"


def has_role(user, role: str) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    cache = getattr(user, "_role_cache", None)
    if cache is None:
        cache = user._role_cache = set(user.groups.values_list("name", flat=True))
    return role in cache


def is_reviewer(user) -> bool:
    return has_role(user, REVIEWERS)


def is_operator(user) -> bool:
    return has_role(user, OPERATORS)


def is_auditor(user) -> bool:
    return has_role(user, AUDITORS)


# Which roles read each kind (docs/reference/http-api.md): a user in none of
# them is answered 403, on lists and details alike; a row of a kind they read
# but outside their teams (or another agent's) is a 404 (`visible_to`).
READS = {
    "dead_letters": (OPERATORS, AUDITORS),
    "jobs": (OPERATORS, AUDITORS),
    "webhooks": (OPERATORS, AUDITORS),
    "policies": (OPERATORS, AUDITORS),
    "audit": (AUDITORS,),
    "compensations": (REVIEWERS, OPERATORS, AUDITORS),
    "analytics": (REVIEWERS, AUDITORS),
}
# Agents (users in no role) read the dead letters of the plans they submitted.
AGENTS_READ = {"dead_letters"}


def is_agent(user) -> bool:
    """A user in no role: what submits plans through a token."""
    if not user.is_authenticated or not user.is_active or user.is_superuser:
        return False
    return not any(has_role(user, role) for role in ALL)


def may_read(user, kind: str) -> bool:
    """Whether `user`'s role reads this kind at all (superusers read every kind)."""
    if not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return any(has_role(user, role) for role in READS[kind]) or (kind in AGENTS_READ and is_agent(user))


def in_all_groups(user_ids, groups) -> set:
    """Which of these users are, now, members of every one of `groups` (an
    action policy's `reviewer_group`s): read afresh, never from a cache."""
    user_ids, groups = set(user_ids), set(groups)
    if not groups or not user_ids:
        return user_ids
    have = defaultdict(set)
    for user_id, name in (
        get_user_model()
        .groups.through.objects.filter(user_id__in=user_ids, group__name__in=groups)
        .values_list("user_id", "group__name")
    ):
        have[user_id].add(name)
    return {user_id for user_id in user_ids if groups <= have[user_id]}
