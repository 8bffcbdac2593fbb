"""A reviewer's decisions on a plan and at a gate, bound to what the page
showed (`web.seen`); several plans decided at once from the inbox, after one
confirmation page that shows each; and having the previews taken again
before deciding."""

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from workflows import roles
from workflows.errors import DomainError
from workflows.models import Workflow
from workflows.operations import approvals
from workflows.operations import gates as gate_decisions
from workflows.states import PreviewState, WorkflowStatus
from workflows.web import gate_form, seen
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act
from workflows.web.views.detail import detail_path, detail_url, get_workflow_for_user, live
from workflows.web.views.plans import with_review_facts


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def gate_approve(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    return _gate_decision(request, workflow_id, step_key, gate_decisions.approve, "Gate approved", typed=True)


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def gate_reject(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    return _gate_decision(request, workflow_id, step_key, gate_decisions.reject, "Gate rejected")


def _gate_decision(
    request: HttpRequest, workflow_id: UUID, step_key: str, decision, done: str, typed: bool = False
) -> HttpResponse:
    """A gate's decision from the page's form; an approval carries the
    choice and input of a typed gate (`gate_form.read`)."""
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = get_workflow_for_user(request, workflow_id)
    step = get_object_or_404(workflow.steps, key=step_key, lane=0)
    comment = request.POST.get("comment", "")[:4000]
    shown = seen.from_form(request)
    extra = {}
    if typed:
        try:
            choice, given_input = gate_form.read(step.gate, request.POST)
        except gate_form.Unreadable as exc:
            messages.error(request, f"The decision is not valid for this gate: {exc}")
            return live(request, workflow) if request.htmx else redirect(detail_url(workflow))
        extra = {"choice": choice, "given_input": given_input}
    return act(
        request,
        lambda: decision(workflow, step_key, by=request.user, seen=shown, comment=comment, **extra),
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


VERBS = {"approve": "Approve", "reject": "Reject"}


def _selection(request: HttpRequest, query) -> tuple[str, list[UUID]] | HttpResponse:
    """The decision and the plans a form names (`decision`, `workflow`
    repeated, in order), or the answer refusing them."""
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    decision = query.get("decision", "")
    if decision not in VERBS:
        return HttpResponseBadRequest("Unknown decision: approve or reject.")
    try:
        ids = [UUID(value) for value in dict.fromkeys(query.getlist("workflow"))]
    except ValueError:
        return HttpResponseBadRequest("A selected plan is not a plan's id.")
    if not ids or len(ids) > approvals.MAX_AT_ONCE:
        messages.error(
            request,
            f"Select from 1 to {approvals.MAX_AT_ONCE} plans to decide at once"
            + (f", not {len(ids)}." if ids else "."),
        )
        return redirect("inbox")
    return decision, ids


@login_required
@require_GET
def confirm_decisions(request: HttpRequest) -> HttpResponse:
    """The one confirmation of several decisions: each selected plan as it
    stands, its revision, plan hash and previews, which its hidden fields
    carry; what is decided is what this page showed
    (docs/guides/reviewers.md#deciding-several-plans-at-once)."""
    selection = _selection(request, request.GET)
    if isinstance(selection, HttpResponse):
        return selection
    decision, ids = selection
    found = {
        w.pk: w for w in Workflow.objects.visible_to(request.user).filter(pk__in=ids).select_related("submitted_by")
    }
    plans = [found[pk] for pk in ids if pk in found and found[pk].status == WorkflowStatus.PLANNED]
    with_review_facts(plans)
    for workflow in plans:
        workflow.shown = {
            step["key"]: step["shown_preview"]["digest"]
            for step in workflow.review_steps
            if step["shown_preview"] and step["shown_preview"]["state"] == PreviewState.READY
        }
    left_out = [found.get(pk) or pk for pk in ids if pk not in found or found[pk].status != WorkflowStatus.PLANNED]
    context = {"decision": decision, "verb": VERBS[decision], "plans": plans, "left_out": left_out}
    return render(request, "workflows/decisions_confirm.html", context)


@login_required
@require_POST
@needs_recent_sign_in(back="inbox")
def decide_several(request: HttpRequest) -> HttpResponse:
    """Each plan of the confirmed page decided on its own, on what the page
    showed of it; then each outcome, decided or refused and why."""
    selection = _selection(request, request.POST)
    if isinstance(selection, HttpResponse):
        return selection
    verb, ids = selection
    comment = request.POST.get("comment", "")[:4000]
    decisions = [approvals.Decision(pk, verb, seen.from_form(request, f"-{pk}"), comment) for pk in ids]
    try:
        outcomes = approvals.decide_each(decisions, by=request.user)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("inbox")
    names = dict(Workflow.objects.visible_to(request.user).filter(pk__in=ids).values_list("pk", "name"))
    results = [
        {"workflow": d.workflow, "name": names.get(d.workflow), "seen": d.seen, "refused": refused}
        for d, refused in zip(decisions, outcomes, strict=True)
    ]
    done = sum(1 for r in results if r["refused"] is None)
    context = {"verb": VERBS[verb], "results": results, "done": done, "refused": len(results) - done}
    return render(request, "workflows/decisions_results.html", context)
