"""A workflow's steps: the steps partial the page polls while previews are
taken, and settling an in-doubt step (`operations.resolution`)."""

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_POST

from workflows import persons, roles
from workflows.operations import resolution
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act
from workflows.web.views.detail import detail_context, detail_path, detail_url, get_workflow_for_user, live


@login_required
@require_GET
def workflow_steps(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    """The steps with their previews, which the page asks for again while a worker takes them."""
    workflow = get_workflow_for_user(request, workflow_id)
    return render(request, "workflows/workflow_detail.html#steps", detail_context(request, workflow))


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def resolve_step(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    if not roles.is_operator(request.user):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    step = get_object_or_404(workflow.steps, key=step_key)

    def resolve() -> None:
        resolved = resolution.resolve(
            step,
            by=request.user,
            decision=request.POST.get("decision", ""),
            reason=request.POST.get("reason", ""),
            external_ref=request.POST.get("external_ref", ""),
        )
        if resolved.proposed_resolution is not None:
            messages.info(
                request,
                "Later steps read this step's result: your answer takes effect once a second person confirms it.",
            )

    return act(
        request,
        resolve,
        done=f"Resolved step {step.key}.",
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def confirm_resolution(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    if not (roles.is_reviewer(request.user) or roles.is_operator(request.user)):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    step = get_object_or_404(workflow.steps.select_related("proposed_by"), key=step_key)
    if step.proposed_by is not None and persons.same(step.proposed_by, request.user):
        raise PermissionDenied("You gave this answer: a second person confirms it.")

    def confirm() -> None:
        resolution.confirm(
            step,
            by=request.user,
            reason=request.POST.get("reason", ""),
            digest=request.POST.get("resolution_digest", ""),
        )

    return act(
        request,
        confirm,
        done=f"Confirmed the resolution of step {step.key}: it takes effect.",
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
    )
