"""The plans: the reviewer's inbox and the list of workflows, with the facts
a reviewer weighs per step; and cancelling a plan."""

from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from workflows import actions, roles
from workflows.engine import policy
from workflows.errors import DomainError
from workflows.models import Approval, Step, Workflow
from workflows.operations import approvals, cancellation, claims
from workflows.states import WorkflowStatus
from workflows.web import arguments
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act
from workflows.web.pagination import page_by_created
from workflows.web.views.detail import detail_path, detail_url, get_workflow_for_user, live

PAGE_SIZE = 50
RISK_ORDER = ["LOW", "MEDIUM", "HIGH"]


@login_required
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    awaiting, next_cursor = [], None
    claim = request.GET.get("claim", "")
    if claim not in INBOX_FILTERS:
        return HttpResponseBadRequest("Unknown filter: claim is 'mine', 'unclaimed' or left out.")
    if roles.is_reviewer(request.user):
        plans = Workflow.objects.reviewable_by(request.user).select_related("submitted_by", "claimed_by")
        if claim == "mine":
            plans = claims.held_by(plans, request.user)
        elif claim == "unclaimed":
            plans = claims.unclaimed(plans)
        try:
            awaiting, next_cursor = page_by_created(plans, request.GET.get("cursor") or None, PAGE_SIZE)
        except DomainError as exc:
            return HttpResponseBadRequest(exc.message)
    for workflow in awaiting:
        workflow.holder = claims.holder(workflow)
    at_gates = []
    if roles.is_reviewer(request.user) and not request.GET.get("cursor"):
        at_gates = list(
            Workflow.objects.visible_to(request.user)
            .filter(status=WorkflowStatus.WAITING_GATE)
            .exclude(submitted_by=request.user)
            .select_related("submitted_by")
            .order_by("updated_at")[:PAGE_SIZE]
        )
    template = "workflows/inbox.html#rows" if request.htmx else "workflows/inbox.html"
    return render(
        request,
        template,
        {
            "awaiting": with_review_facts(awaiting),
            "next_cursor": next_cursor,
            "claim": claim,
            "filters": INBOX_FILTERS,
            "at_gates": at_gates,
            "max_at_once": approvals.MAX_AT_ONCE,
        },
    )


# The inbox's claim filters: value -> label.
INBOX_FILTERS = {"": "All", "mine": "Mine", "unclaimed": "Unclaimed"}


PREVIEW_FIELDS = (
    "preview_state",
    "preview",
    "preview_digest",
    "preview_error",
    "preview_failure_class",
    "approved_preview",
)


def with_review_facts(workflows: list[Workflow]) -> list[Workflow]:
    """What a reviewer weighs, per step: the action, its arguments labelled
    (secrets only as references), its effect preview, its risk under current
    policy, and how it would be undone — or that it cannot be. Three queries
    for the whole page."""
    current = policy.policies_for({step["action"] for w in workflows for step in w.plan})
    counts = dict(
        Approval.objects.filter(workflow__in=workflows, decision=Approval.Decision.APPROVE)
        .values("workflow")
        .annotate(n=Count("id"))
        .values_list("workflow", "n")
    )
    previews = {
        (row["workflow_id"], row["key"]): row
        for row in Step.objects.filter(workflow__in=workflows, lane=0).values("workflow_id", "key", *PREVIEW_FIELDS)
    }
    for workflow in workflows:
        workflow.review_steps = []
        for step in workflow.plan:
            rules = current[step["action"]]
            if step.get("compensation"):
                undo = step["compensation"]["action"]
            else:
                try:
                    undo = actions.get(step["action"]).compensation
                except KeyError:
                    undo = None
            stored = previews.get((workflow.pk, step["key"]))
            workflow.review_steps.append(
                {
                    **step,
                    "risk": rules.risk,
                    "undo": undo,
                    "enabled": rules.enabled,
                    "fields": arguments.fields(step["action"], step["args"]),
                    "shown_preview": arguments.preview_of(stored) if stored else None,
                }
            )
        workflow.required = policy.approvals_required(policy.plan_rules(workflow, current))
        workflow.approvals_so_far = counts.get(workflow.pk, 0)
        workflow.highest_risk = max((s["risk"] for s in workflow.review_steps), key=RISK_ORDER.index)
    return workflows


@login_required
@require_GET
def workflow_list(request: HttpRequest) -> HttpResponse:
    workflows = Workflow.objects.visible_to(request.user).select_related("submitted_by")
    status = request.GET.get("status", "")
    if status in WorkflowStatus.values:
        workflows = workflows.filter(status=status)
    try:
        rows, next_cursor = page_by_created(workflows, request.GET.get("cursor") or None, PAGE_SIZE)
    except DomainError as exc:
        return HttpResponseBadRequest(exc.message)
    context = {"workflows": rows, "next_cursor": next_cursor, "status": status, "statuses": WorkflowStatus.values}
    template = "workflows/workflow_list.html#rows" if request.htmx else "workflows/workflow_list.html"
    return render(request, template, context)


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: detail_path(workflow_id))
def cancel(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    workflow = get_workflow_for_user(request, workflow_id)
    # Who may cancel depends on the status; the operation checks again under its lock.
    if workflow.status in cancellation.CANCELLABLE and not cancellation.may_cancel(workflow, request.user):
        raise PermissionDenied
    return act(
        request,
        lambda: cancellation.cancel(workflow, by=request.user, reason=request.POST.get("reason", "")),
        done=f"Cancelled: {workflow.name}",
        back=detail_url(workflow),
        partial=lambda: live(request, workflow),
    )
