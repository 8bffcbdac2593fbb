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


def sees_recovery(user) -> bool:
    """Reads what is left to mend (dead letters, jobs, deliveries) and the
    actions' policies: operators, and auditors, who check it."""
    return is_operator(user) or is_auditor(user)


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
