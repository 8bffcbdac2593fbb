"""A reviewer's decisions on a plan and at a gate, bound to what the page
showed (`web.seen`); and having the previews taken again before deciding."""

from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_POST

from workflows import roles
from workflows.operations import approvals
from workflows.operations import gates as gate_decisions
from workflows.web import seen
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act
from workflows.web.views.detail import detail_path, detail_url, get_workflow_for_user, live


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def gate_approve(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    return _gate_decision(request, workflow_id, step_key, gate_decisions.approve, "Gate approved")


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def gate_reject(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    return _gate_decision(request, workflow_id, step_key, gate_decisions.reject, "Gate rejected")


def _gate_decision(request: HttpRequest, workflow_id: UUID, step_key: str, decision, done: str) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    get_object_or_404(workflow.steps, key=step_key, lane=0)
    comment = request.POST.get("comment", "")[:4000]
    shown = seen.from_form(request)
    return act(
        request,
        lambda: decision(workflow, step_key, by=request.user, seen=shown, comment=comment),
        done=f"{done}: {workflow.name}",
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
        stale=lambda _: seen.changed_since(request, workflow.pk, shown),
    )


def _decide(request: HttpRequest, workflow_id: UUID, decision, done: str) -> HttpResponse:
    """A plan's decision from its page's form, on what the form says the
    reviewer saw (`seen`). A non-reviewer's post is refused here, as a page
    (roles are read once per request); the operation checks eligibility,
    state, four eyes and revision under the plan's lock."""
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    comment = request.POST.get("comment", "")[:4000]
    shown = seen.from_form(request)
    return act(
        request,
        lambda: decision(workflow, by=request.user, seen=shown, comment=comment),
        done=f"{done}: {workflow.name}",
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
        stale=lambda _: seen.changed_since(request, workflow.pk, shown),
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def approve(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    return _decide(request, workflow_id, approvals.approve, "Approved")


@login_required
@require_POST
def retake_previews(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    return act(
        request,
        lambda: approvals.retake_previews(workflow, by=request.user),
        done="A worker is taking the previews again.",
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def reject(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    return _decide(request, workflow_id, approvals.reject, "Rejected")
