"""The console's standing grants: those of the person's teams, a form to
grant one, and the second reviewer's authorization and the revocation of
each (`operations.grants`, docs/explanation/policies.md#standing-grants)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from workflows import actions, roles, teams
from workflows.errors import DomainError
from workflows.models import StandingGrant
from workflows.operations import grants
from workflows.web.auth import needs_recent_sign_in
from workflows.web.views.delegation import _until

TEMPLATE = "workflows/grants.html"
SHOWN = 200


def _staff(request: HttpRequest) -> None:
    if not teams.is_staff_role(request.user):
        raise PermissionDenied("Your role does not read standing grants.")


def _context(request: HttpRequest, **form) -> dict:
    rows = (
        StandingGrant.objects.visible_to(request.user)
        .select_related("agent", "team", "granted_by", "authorized_by", "revoked_by")
        .order_by("-created_at", "-id")[:SHOWN]
    )
    return {
        "grants": rows,
        "actions": actions.names(),
        "can_grant": roles.is_reviewer(request.user),
        "can_revoke": roles.is_reviewer(request.user) or roles.is_operator(request.user),
        "max_uses": grants.MAX_USES,
        "max_days": grants.MAX_DAYS,
        "form": form,
    }


def _uses(text: str):
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else text


@login_required
@require_http_methods(["GET", "POST"])
@needs_recent_sign_in(back="grant_list")
def grant_list(request: HttpRequest) -> HttpResponse:
    _staff(request)
    if request.method == "GET":
        return render(request, TEMPLATE, _context(request))
    agent, action, when, max_uses, until = (
        request.POST.get(name, "") for name in ("agent", "action", "when", "max_uses", "until")
    )
    try:
        made = grants.create(
            request.user, agent=agent, action=action, when=when, max_uses=_uses(max_uses), until=_until(until)
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        form = {"agent": agent, "action": action, "when": when, "max_uses": max_uses, "until": until}
        return render(request, TEMPLATE, _context(request, errors=exc.fields or {}, **form), status=exc.status)
    messages.success(request, f"Granted: {made.basis} is {made.status}.")
    return redirect("grant_list")


def _decide(request: HttpRequest, grant_id, decide, done: str) -> HttpResponse:
    """Authorize or revoke one grant the person may see, with the form's
    reason; what the operation refuses is shown on the list, nothing done."""
    grant = grants.get_for_user(request.user, grant_id)
    try:
        decide(grant, by=request.user, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done.format(basis=grant.basis))
    return redirect("grant_list")


@login_required
@require_POST
@needs_recent_sign_in(back=lambda grant_id: reverse("grant_list"))
def grant_authorize(request: HttpRequest, grant_id) -> HttpResponse:
    return _decide(request, grant_id, grants.authorize, "Authorized: {basis} is ACTIVE.")


@login_required
@require_POST
@needs_recent_sign_in(back=lambda grant_id: reverse("grant_list"))
def grant_revoke(request: HttpRequest, grant_id) -> HttpResponse:
    return _decide(request, grant_id, grants.revoke, "Revoked: {basis}.")
