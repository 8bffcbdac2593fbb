"""What every console page's template knows about its user."""

from django.http import HttpRequest

from workflows import roles


def roles_context(request: HttpRequest) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "is_reviewer": roles.is_reviewer(user),
        "is_operator": roles.is_operator(user),
        "is_auditor": roles.is_auditor(user),
    }
