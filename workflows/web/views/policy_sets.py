"""The console's Cedar policy sets: a team's live version and history, the
proposals waiting for a reviewer (each as a diff against the live version,
with what it would have decided on the team's recent plans), a proposal
form for operators, and a playground that evaluates a plan as
`POST /api/v1/policies/evaluate` does. The rules live in
`workflows.operations.policy_sets`; these views parse forms and report."""

import json

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from workflows import roles, teams
from workflows.errors import DomainError
from workflows.models import PolicyChange
from workflows.operations import plans, policy_sets
from workflows.policy import evaluation
from workflows.web.auth import needs_recent_sign_in


def _shown(request: HttpRequest, team: str) -> dict:
    if not teams.is_staff_role(request.user):
        raise PermissionDenied("Your role does not read policy sets.")
    try:
        return policy_sets.show(team, reader=request.user)
    except DomainError:
        raise Http404("No such policy set.") from None


def _context(request: HttpRequest, found: dict, text: str = "", error: str = "") -> dict:
    pending = (
        PolicyChange.objects.visible_to(request.user)
        .filter(policy_set_version__policy_set__name=found["name"], status="PENDING")
        .select_related("requested_by", "policy_set_version__policy_set")
        .order_by("created_at")
    )
    return {
        **found,
        "pending": [
            {
                "change": change,
                "diff": policy_sets.diff(change),
                "replay": policy_sets.would_have(change.policy_set_version),
                "can_decide": roles.is_reviewer(request.user) and change.requested_by_id != request.user.pk,
            }
            for change in pending
        ],
        "can_propose": roles.is_operator(request.user),
        "text": text or (found["live"].text if found["live"] else ""),
        "error": error,
    }


@login_required
@require_http_methods(["GET", "POST"])
@needs_recent_sign_in(back="policy_set_detail")
def policy_set_detail(request: HttpRequest, team: str) -> HttpResponse:
    found = _shown(request, team)
    if request.method == "GET":
        return render(request, "workflows/policy_set.html", _context(request, found))
    text = request.POST.get("text", "")
    try:
        policy_sets.propose(team, by=request.user, text=text, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        return render(
            request, "workflows/policy_set.html", _context(request, found, text, exc.message), status=exc.status
        )
    return redirect("policy_set_detail", team=team)


@login_required
@require_http_methods(["GET", "POST"])
def policy_playground(request: HttpRequest, team: str) -> HttpResponse:
    found = _shown(request, team)
    context = {"name": found["name"], "agent": "", "plan": "", "result": None, "error": ""}
    if request.method == "POST":
        context["agent"], context["plan"] = request.POST.get("agent", ""), request.POST.get("plan", "")
        try:
            context["result"] = _evaluate(request, team, context["agent"], context["plan"])
        except (DomainError, ValueError) as exc:
            context["error"] = getattr(exc, "message", str(exc))
    return render(request, "workflows/policy_playground.html", context, status=400 if context["error"] else 200)


def _evaluate(request: HttpRequest, team: str, agent_name: str, text: str):
    """The API's evaluation, for an agent of this team and a pasted plan."""
    agent = get_user_model().objects.filter(username=agent_name, is_active=True).first()
    if agent is None or not roles.is_agent(agent) or plans.submitting_team(agent).name != team:
        raise ValueError(f"No agent of {team} named {agent_name[:150]!r}.")
    if not (roles.is_reviewer(request.user) or roles.is_operator(request.user)):
        raise PermissionDenied("Reviewers and operators of the team evaluate plans.")
    if len(text) > evaluation.MAX_PLAN_CHARS:
        raise ValueError("The plan is too large.")
    try:
        body = json.loads(text or "null")
    except RecursionError:
        raise ValueError(f"A step's args may nest at most {evaluation.MAX_DEPTH} levels deep.") from None
    steps = body.get("steps") if isinstance(body, dict) else None
    if not isinstance(steps, list) or not steps or len(steps) > plans.MAX_STEPS:
        raise ValueError(f'A plan is {{"steps": [...]}} with 1 to {plans.MAX_STEPS} steps.')
    for step in steps:
        if not (
            isinstance(step, dict)
            and isinstance(step.get("key"), str)
            and isinstance(step.get("action"), str)
            and isinstance(step.get("args", {}), dict)
        ):
            raise ValueError('Each step is {"key": "...", "action": "...", "args": {...}}.')
    return policy_sets.evaluate(
        {"steps": [{"key": s["key"], "action": s["action"], "args": s.get("args", {})} for s in steps]},
        agent=agent.get_username(),
        team=team,
    )
