"""Away? Hand your queue over: the reviewer's own delegation
(`operations.delegation`, docs/guides/reviewers.md#away-hand-your-queue-over).

Not a decision on anyone's work, so no recent sign-in is asked for: it
moves notices, never the right to decide."""

from datetime import UTC, datetime

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from workflows import roles, teams
from workflows.errors import DomainError
from workflows.operations import delegation

TEMPLATE = "workflows/delegation.html"


def _reviewer(request: HttpRequest) -> None:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied("Only reviewers hand their review queue over.")


def _until(text: str) -> datetime | None:
    """The form's time, read as UTC (the console shows every time in UTC)."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def _context(request: HttpRequest, **form) -> dict:
    User = get_user_model()
    colleagues = (
        User.objects.filter(
            teams.members_of_q(teams.team_ids(request.user)), is_active=True, groups__name=roles.REVIEWERS
        )
        .exclude(pk=request.user.pk)
        .order_by(User.USERNAME_FIELD)
        .distinct()
    )
    return {
        "current": delegation.current(request.user),
        "colleagues": colleagues,
        "max_days": delegation.MAX_DAYS,
        "form": form,
    }


@login_required
@require_http_methods(["GET", "POST"])
def delegation_page(request: HttpRequest) -> HttpResponse:
    _reviewer(request)
    if request.method == "GET":
        return render(request, TEMPLATE, _context(request))
    to, until, note = (request.POST.get(name, "") for name in ("to", "until", "note"))
    try:
        started = delegation.start(request.user, to=to, until=_until(until), note=note)
    except DomainError as exc:
        messages.error(request, exc.message)
        # A refused note (one holding a credential) is not echoed back into the page.
        errors = exc.fields or {}
        form = {"to": to, "until": until, "note": "" if "note" in errors else note, "errors": errors}
        return render(request, TEMPLATE, _context(request, **form), status=exc.status)
    messages.success(
        request, f"Until {started.until:%Y-%m-%d %H:%M} UTC, {started.delegate.get_username()} gets your notices."
    )
    return redirect("delegation")


@login_required
@require_POST
def delegation_end(request: HttpRequest) -> HttpResponse:
    try:
        delegation.end(request.user)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Welcome back: your notices come to you again.")
    return redirect("delegation")
