"""The compensation console: request an undo, decide on it, watch it run.

Operators request; a reviewer other than the requester authorizes or
declines; auditors may look. The rules live in `workflows.operations.compensation`
(which rechecks roles, the requester and the state under row locks); these
views choose the objects, show the plan and report the outcome.
"""

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from workflows import persons, roles
from workflows.errors import DomainError
from workflows.models import AuditEvent, Compensation, DeadLetter, Workflow
from workflows.operations import compensation
from workflows.states import CompensationStatus, StepStatus
from workflows.web import seen
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act, list_page, reads
from workflows.web.views.detail import get_workflow_for_user

PAGE_SIZE = 50
ALL_STATUSES = "all"
# Mirrors the model's one_open_compensation_per_workflow constraint.
OPEN = (CompensationStatus.REQUESTED, CompensationStatus.AUTHORIZED, CompensationStatus.RUNNING)
LIVE = (CompensationStatus.AUTHORIZED, CompensationStatus.RUNNING)


def _get_workflow_to_compensate(request: HttpRequest, workflow_id: UUID) -> Workflow:
    if not roles.is_operator(request.user):
        raise PermissionDenied("Only operators can request a compensation.")
    return get_workflow_for_user(request, workflow_id)


def _get_compensation_for_user(request: HttpRequest, compensation_id: UUID, *, decide: bool = False) -> Compensation:
    """Those who see it read it (`Compensation.objects.visible_to`: 404
    otherwise, 403 for a role that reads none); only reviewers decide (and
    `compensation` refuses the requester)."""
    reads(request, "compensations")
    comp = get_object_or_404(
        Compensation.objects.visible_to(request.user).select_related("workflow", "requested_by", "authorized_by"),
        pk=compensation_id,
    )
    if decide and not roles.is_reviewer(request.user):
        raise PermissionDenied("Only reviewers can authorize or decline a compensation.")
    return comp


def _undo_rows(workflow: Workflow, chosen: list[str] | None) -> list[dict]:
    """Each completed plan step, in the order its undo would run, with that undo."""
    rows = []
    for step in workflow.steps.filter(lane=0, status=StepStatus.COMPLETE).order_by("-position"):
        row = {"step": step, "checked": chosen is None or step.key in chosen, "undo": None, "problem": ""}
        try:
            undo = compensation.undo_of(step)
        except DomainError as exc:
            row["problem"] = exc.message
        else:
            if undo is None:
                row["irreversible"] = compensation.IRREVERSIBLE_WHY.format(action=step.action)
            else:
                row["undo"] = {"action": undo[0], "args": undo[1]}
        rows.append(row)
    return rows


def _request_context(workflow: Workflow, *, chosen: list[str] | None = None, reason: str = "") -> dict:
    blocked = ""
    if workflow.status not in compensation.COMPENSABLE_WORKFLOW:
        blocked = f"A {workflow.status} workflow cannot be compensated now."
    return {
        "workflow": workflow,
        "rows": _undo_rows(workflow, chosen),
        "reason": reason,
        "blocked": blocked,
        "open_compensation": workflow.compensations.filter(status__in=OPEN).first(),
    }


@login_required
@require_http_methods(["GET", "POST"])
@needs_recent_sign_in(back="compensation_request")
def compensation_request(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    workflow = _get_workflow_to_compensate(request, workflow_id)
    if request.method == "GET":
        return render(request, "workflows/compensation_request.html", _request_context(workflow))
    chosen = request.POST.getlist("steps")
    reason = request.POST.get("reason", "")
    try:
        if not chosen:
            # An empty list would mean "every completed step" to `compensation.request`.
            raise compensation.CompensationInvalid("Choose at least one step to compensate.")
        comp = compensation.request(workflow, by=request.user, reason=reason, step_keys=chosen)
    except DomainError as exc:
        messages.error(request, exc.message)
        workflow.refresh_from_db()
        # A refused reason (one holding a credential) is not echoed back into the page.
        reason = "" if exc.fields and "reason" in exc.fields else reason
        context = _request_context(workflow, chosen=chosen, reason=reason)
        return render(request, "workflows/compensation_request.html", context, status=exc.status)
    messages.success(request, "Compensation requested; a reviewer other than you must authorize it.")
    return redirect("compensation_detail", compensation_id=comp.pk)


def _detail_context(request: HttpRequest, comp: Compensation) -> dict:
    undo_steps = {step.key: step for step in comp.steps.prefetch_related("attempts")}
    dead_letters = {
        entry.step_id: entry
        for entry in DeadLetter.objects.filter(step__in=undo_steps.values(), status=DeadLetter.Status.OPEN)
    }
    events = list(
        AuditEvent.objects.filter(workflow_id=comp.workflow_id, object_type="compensation", object_id=str(comp.pk))
    )
    plan = []
    for item in comp.plan:
        step = undo_steps.get(item["key"])
        plan.append({**item, "step": step, "dead_letter": dead_letters.get(step.pk) if step else None})
    return {
        "comp": comp,
        "workflow": comp.workflow,
        "plan": plan,
        "events": events,
        # A decline leaves authorized_by empty: who declined is in the audit trail only.
        "declined_by": next((event.actor for event in events if event.verb == "compensation.declined"), ""),
        "live": comp.status in LIVE,
        # What a decision names: the digest of the undo steps shown.
        "undo_hash": compensation.current_hash(comp),
        "can_decide": (
            comp.status == CompensationStatus.REQUESTED
            and roles.is_reviewer(request.user)
            and not persons.same(request.user, comp.requested_by_id)
        ),
    }


@login_required
@require_GET
@vary_on_headers("HX-Request")
def compensation_detail(request: HttpRequest, compensation_id: UUID) -> HttpResponse:
    comp = _get_compensation_for_user(request, compensation_id)
    template = "workflows/compensation_detail.html#live" if request.htmx else "workflows/compensation_detail.html"
    return render(request, template, _detail_context(request, comp))


def _decide(request: HttpRequest, compensation_id: UUID, decision, done: str) -> HttpResponse:
    comp = _get_compensation_for_user(request, compensation_id, decide=True)

    def live() -> HttpResponse:
        fresh = _get_compensation_for_user(request, compensation_id, decide=True)
        return render(request, "workflows/compensation_detail.html#live", _detail_context(request, fresh))

    shown = seen.from_form(request)
    return act(
        request,
        lambda: decision(comp, by=request.user, seen=shown, reason=request.POST.get("reason", "")),
        done=f"{done}: compensation of {comp.workflow.name}",
        back=reverse("compensation_detail", kwargs={"compensation_id": comp.pk}),
        partial=live,
    )


@login_required
@require_POST
@needs_recent_sign_in(back="compensation_detail")
def compensation_authorize(request: HttpRequest, compensation_id: UUID) -> HttpResponse:
    return _decide(request, compensation_id, compensation.authorize, "Authorized")


@login_required
@require_POST
@needs_recent_sign_in(back="compensation_detail")
def compensation_decline(request: HttpRequest, compensation_id: UUID) -> HttpResponse:
    return _decide(request, compensation_id, compensation.decline, "Declined")


@login_required
@require_GET
@vary_on_headers("HX-Request")
def compensation_list(request: HttpRequest) -> HttpResponse:
    """Awaiting a decision by default, newest first."""
    reads(request, "compensations")
    status = request.GET.get("status") or CompensationStatus.REQUESTED
    comps = Compensation.objects.visible_to(request.user).select_related("workflow", "requested_by", "authorized_by")
    if status in CompensationStatus.values:
        comps = comps.filter(status=status)
    elif status != ALL_STATUSES:
        return HttpResponseBadRequest("Unknown status.")
    return list_page(
        request,
        comps,
        "workflows/compensation_list.html",
        rows="compensations",
        page_size=PAGE_SIZE,
        context={"status": status, "statuses": [*CompensationStatus.values, ALL_STATUSES]},
    )
