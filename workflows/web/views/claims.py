"""Who handles a plan: claim it, release it, hand it to another reviewer
(`operations.claims`)."""

from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_POST

from workflows import roles
from workflows.operations import claims
from workflows.web.pages import act
from workflows.web.views.detail import detail_url, get_workflow_for_user, live


def _claiming(request: HttpRequest, workflow_id: UUID, operation, done) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    return act(
        request,
        lambda: operation(workflow),
        done=done,
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
    )


@login_required
@require_POST
def claim(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    return _claiming(
        request, workflow_id, lambda workflow: claims.claim(workflow, by=request.user), "You are handling this plan."
    )


@login_required
@require_POST
def release(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    return _claiming(
        request,
        workflow_id,
        lambda workflow: claims.release(workflow, by=request.user),
        "Released: the plan is back with every reviewer.",
    )


@login_required
@require_POST
def assign(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    to = request.POST.get("to", "")

    def assigned(workflow) -> str:
        # While `to` is away, the plan went to their delegate (docs/explanation/review.md#delegation).
        holder = workflow.claimed_by.get_username()
        return f"Assigned to {to}." if holder == to else f"{to} is away: assigned to their delegate, {holder}."

    return _claiming(request, workflow_id, lambda workflow: claims.assign(workflow, by=request.user, to=to), assigned)
