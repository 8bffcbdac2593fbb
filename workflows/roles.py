"""Roles are plain Django groups; membership is all it takes."""

REVIEWERS = "reviewers"
OPERATORS = "operators"
AUDITORS = "auditors"
ALL = (REVIEWERS, OPERATORS, AUDITORS)


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
