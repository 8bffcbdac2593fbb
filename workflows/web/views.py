"""The console: thin function-based views over the named operations.

HTMX requests get the partial they asked for; plain form posts get a
redirect, so every action also works without JavaScript.
"""

from uuid import UUID

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from workflows import actions, persons, roles
from workflows.engine import gates, policy
from workflows.errors import DomainError
from workflows.models import Approval, ArchivedWorkflow, AuditEvent, Step, Workflow
from workflows.operations import approvals, cancellation, claims, compensation, resolution, revisions
from workflows.operations import gates as gate_decisions
from workflows.states import TERMINAL_WORKFLOW, PreviewState, StepStatus, WorkflowStatus
from workflows.web import arguments, editing, seen
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act
from workflows.web.pagination import page_by_created

PAGE_SIZE = 50
RISK_ORDER = ["LOW", "MEDIUM", "HIGH"]


def roles_context(request: HttpRequest) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "is_reviewer": roles.is_reviewer(user),
        "is_operator": roles.is_operator(user),
        "is_auditor": roles.is_auditor(user),
    }


def _get_workflow_for_user(request: HttpRequest, workflow_id: UUID) -> Workflow:
    return get_object_or_404(
        Workflow.objects.visible_to(request.user).select_related("submitted_by", "team"), pk=workflow_id
    )


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
            "awaiting": _with_review_facts(awaiting),
            "next_cursor": next_cursor,
            "claim": claim,
            "filters": INBOX_FILTERS,
            "at_gates": at_gates,
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


def _with_review_facts(workflows: list[Workflow]) -> list[Workflow]:
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
        workflow.required = policy.approvals_required(current[s["action"]] for s in workflow.plan)
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


def _approval_progress(workflow: Workflow) -> dict:
    """Distinct approvals that still count, of those the plan needs: a
    2-of-2 plan stays PLANNED after the first one."""
    plan_policies = list(policy.policies_for(step["action"] for step in workflow.plan).values())
    return {
        "counted": len(policy.valid_approvals(workflow, plan_policies)),
        "required": policy.approvals_required(plan_policies),
    }


TIMELINE_WIDTH = 800
ROW_HEIGHT = 22


def timeline(steps) -> dict | None:
    """Geometry of the step/attempt timeline: one row per step, one bar per
    attempt placed by its start and end, so retries and waits show as gaps."""
    attempts = [a for step in steps for a in step.attempts.all()]
    if not attempts:
        return None
    now = timezone.now()
    start = min(a.started_at for a in attempts)
    end = max(a.finished_at or now for a in attempts)
    span = max((end - start).total_seconds(), 0.001)
    label_width = 160
    scale = (TIMELINE_WIDTH - label_width - 10) / span
    rows = []
    for index, step in enumerate(steps):
        bars = []
        for attempt in step.attempts.all():
            begin = (attempt.started_at - start).total_seconds()
            length = ((attempt.finished_at or now) - attempt.started_at).total_seconds()
            bars.append(
                {
                    "x": round(label_width + begin * scale, 1),
                    "w": max(round(length * scale, 1), 2),
                    "status": attempt.status.lower(),
                    "number": attempt.number,
                    "ms": int(length * 1000),
                    "failure_class": attempt.failure_class,
                    "offset_ms": int(begin * 1000),
                }
            )
        rows.append({"y": index * ROW_HEIGHT, "label": step.key, "bars": bars, "retries": max(len(bars) - 1, 0)})
    return {
        "rows": rows,
        "width": TIMELINE_WIDTH,
        "height": len(rows) * ROW_HEIGHT + 20,
        "span_ms": int(span * 1000),
        "label_width": label_width,
        "axis_y": len(rows) * ROW_HEIGHT + 14,
    }


def _with_arguments_and_previews(steps: list[Step]) -> None:
    """Each step's labelled arguments (a `$from` with the value it took once
    its step has a result) and preview, for the templates."""
    results = {step.key: step.result for step in steps if step.lane == 0 and step.result is not None}
    for step in steps:
        step.fields = arguments.fields(step.action, step.args, results if step.lane == 0 else {})
        step.shown_preview = arguments.preview_of(step)
        step.is_blocked = step.status == StepStatus.BLOCKED


def _with_proofs(steps: list[Step]) -> None:
    """Each attempt's approval proof as the page shows it: the key id, and
    the approvers it names (by opaque id: the account's primary key) with
    their user names."""
    for step in steps:
        step.attempt_rows = list(step.attempts.all())
    subs = {
        approver["sub"] for step in steps for attempt in step.attempt_rows for approver in attempt.proof_approvers or []
    }
    names = (
        {
            str(pk): name
            for pk, name in get_user_model()
            .objects.filter(pk__in=[sub for sub in subs if sub.isdigit()])
            .values_list("pk", "username")
        }
        if subs
        else {}
    )
    for step in steps:
        for attempt in step.attempt_rows:
            attempt.proof_names = [
                {"name": names.get(a["sub"], f"#{a['sub']}"), "at": a["at"]} for a in attempt.proof_approvers or []
            ]


def _with_pending_resolutions(steps: list[Step], user) -> None:
    """An operator's answer waiting for a second person, and whether this
    user may confirm it (`operations.resolution`)."""
    may_confirm = roles.is_reviewer(user) or roles.is_operator(user)
    for step in steps:
        step.pending = None
        if step.proposed_resolution is not None:
            mine = persons.same(step.proposed_by, user)
            step.pending = {
                **step.proposed_resolution,
                "by": step.proposed_by.get_username(),
                "mine": mine,
                "digest": step.proposal_digest(),
                "can_confirm": may_confirm and not mine,
            }


def _detail_context(request: HttpRequest, workflow: Workflow) -> dict:
    steps = list(workflow.steps.select_related("proposed_by").prefetch_related("attempts"))
    _with_arguments_and_previews(steps)
    _with_proofs(steps)
    _with_pending_resolutions(steps, request.user)
    events = AuditEvent.objects.filter(workflow_id=workflow.pk).order_by("-id")[:200]
    compensations = list(workflow.compensations.select_related("requested_by", "authorized_by").order_by("-lane"))
    reviewer = roles.is_reviewer(request.user) and not persons.same(request.user, workflow.submitted_by_id)
    blocked = workflow.status == WorkflowStatus.FAILED and any(step.status == StepStatus.BLOCKED for step in steps)
    awaiting = workflow.status == WorkflowStatus.PLANNED or blocked
    return {
        "workflow": workflow,
        "steps": steps,
        "timeline": timeline(steps),
        "compensations": compensations,
        "can_request_compensation": (
            roles.is_operator(request.user)
            and not workflow.restored_at
            and workflow.status in compensation.COMPENSABLE_WORKFLOW
            and not any(c.status in compensation.OPEN for c in compensations)
            and any(step.lane == 0 and step.status == StepStatus.COMPLETE for step in steps)
        ),
        "can_cancel": cancellation.may_cancel(workflow, request.user),
        **_claim_context(request, workflow, reviewer and awaiting),
        **_gate_context(workflow, steps, reviewer),
        "revisions": revisions.history(workflow) if workflow.revision > 1 else [],
        "can_revise": reviewer and workflow.status == WorkflowStatus.PLANNED,
        "co_author": workflow.status == WorkflowStatus.PLANNED
        and workflow.revision > 1
        and persons.among(request.user, persons.plan_authors([workflow])[workflow.pk] - {workflow.submitted_by_id}),
        "events": events,
        "approvals": workflow.approvals.select_related("reviewer"),
        "approval_progress": _approval_progress(workflow) if workflow.status == WorkflowStatus.PLANNED else None,
        # Not while it waits for a person: their half-typed reason would be replaced under their hands.
        "live": workflow.status not in TERMINAL_WORKFLOW
        and workflow.status not in (WorkflowStatus.PLANNED, WorkflowStatus.NEEDS_ATTENTION),
        "can_decide": workflow.status == WorkflowStatus.PLANNED and reviewer,
        # A step blocked by the policy recheck goes on only with a fresh approval.
        "can_reapprove": blocked and reviewer,
        # The form whose approval binds the previews shown (each READY one
        # carries its digest into it).
        "decision_form": "decision-form" if awaiting and reviewer else None,
        "can_retake_previews": awaiting
        and reviewer
        and any(
            step.lane == 0
            and step.status in (StepStatus.PENDING, StepStatus.BLOCKED)
            and step.preview_state in (PreviewState.READY, PreviewState.FAILED)
            for step in steps
        ),
        # While a worker takes them, the steps are looked at again until every preview is in.
        "previews_pending": workflow.status == WorkflowStatus.PLANNED
        and any(step.preview_state == PreviewState.PENDING for step in steps),
    }


def _gate_context(workflow: Workflow, steps: list[Step], reviewer: bool) -> dict:
    """The gate the workflow waits at: its note, its approvals so far, and
    the digest of the results above it, which a reviewer's approval binds."""
    step = next((s for s in steps if s.lane == 0 and s.status == StepStatus.WAITING_GATE), None)
    if workflow.status != WorkflowStatus.WAITING_GATE or step is None:
        return {"gate": None}
    return {
        "gate": {
            "step": step,
            "note": (step.gate or {}).get("note", ""),
            "approvals": len(gates.valid_approvals(step, workflow)),
            "required": gates.required(step),
            "results_digest": gates.results_digest(step),
            "can_decide": reviewer,
        }
    }


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def gate_approve(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    return _gate_decision(request, workflow_id, step_key, gate_decisions.approve, "Gate approved")


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def gate_reject(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    return _gate_decision(request, workflow_id, step_key, gate_decisions.reject, "Gate rejected")


def _gate_decision(request: HttpRequest, workflow_id: UUID, step_key: str, decision, done: str) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = _get_workflow_for_user(request, workflow_id)
    get_object_or_404(workflow.steps, key=step_key, lane=0)
    comment = request.POST.get("comment", "")[:4000]
    shown = seen.from_form(request)
    return act(
        request,
        lambda: decision(workflow, step_key, by=request.user, seen=shown, comment=comment),
        done=f"{done}: {workflow.name}",
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
        stale=lambda _: seen.changed_since(request, workflow.pk, shown),
    )


def _claim_context(request: HttpRequest, workflow: Workflow, may_review: bool) -> dict:
    """Who handles the plan, and what this user may do about it."""
    holder = claims.holder(workflow)
    mine = holder is not None and holder.pk == request.user.pk
    free = holder is None or mine
    return {
        "holder": holder,
        "claim_expires_at": claims.expires_at(workflow) if holder else None,
        "held_by_another": may_review and holder is not None and not mine,
        "can_claim": may_review and holder is None,
        "can_release": mine,
        "can_assign": may_review and free,
        "assignees": list(claims.assignees(workflow).exclude(pk=request.user.pk)) if may_review and free else [],
    }


@login_required
@require_GET
def workflow_detail(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    workflow = (
        Workflow.objects.visible_to(request.user).select_related("submitted_by", "team").filter(pk=workflow_id).first()
    )
    if workflow is None:
        # Moved out by `manage.py archive`: say so (410), to those who saw it.
        record = get_object_or_404(ArchivedWorkflow.objects.visible_to(request.user), workflow_id=workflow_id)
        return render(request, "workflows/archived.html", {"record": record}, status=410)
    context = _detail_context(request, workflow)
    if not request.htmx:  # the holder opening the plan renews their claim; the page's polling does not
        claims.touch(workflow, request.user)
        context["changed_since"] = _changed_since_last_seen(request, workflow)
    template = "workflows/workflow_detail.html#live" if request.htmx else "workflows/workflow_detail.html"
    return render(request, template, context)


def _changed_since_last_seen(request: HttpRequest, workflow: Workflow) -> dict | None:
    """What changed since this reviewer last opened the plan (the revision
    their session last showed them), else since the revision before; and
    remember that they have now seen this one."""
    seen = request.session.get("seen_revisions", {})
    last = seen.get(str(workflow.pk))
    seen[str(workflow.pk)] = workflow.revision
    request.session["seen_revisions"] = dict(list(seen.items())[-200:])  # a bounded memory
    if workflow.revision == 1 or workflow.status != WorkflowStatus.PLANNED:
        return None
    since = last if isinstance(last, int) and 1 <= last < workflow.revision else workflow.revision - 1
    rows = {row.number: row for row in workflow.revisions.filter(number__in=[since, workflow.revision])}
    if since not in rows or workflow.revision not in rows:
        return None
    return {
        "number": workflow.revision,
        "since": since,
        "by": rows[workflow.revision].by.get_username(),
        "last_seen": since == last,
        "changes": revisions.diff(rows[since].plan, rows[workflow.revision].plan),
    }


@login_required
@require_GET
def workflow_steps(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    """The steps with their previews, which the page asks for again while a worker takes them."""
    workflow = _get_workflow_for_user(request, workflow_id)
    return render(request, "workflows/workflow_detail.html#steps", _detail_context(request, workflow))


def _decide(request: HttpRequest, workflow_id: UUID, decision, done: str) -> HttpResponse:
    """A plan's decision from its page's form, on what the form says the
    reviewer saw (`seen`). A non-reviewer's post is refused here, as a page
    (roles are read once per request); the operation checks eligibility,
    state, four eyes and revision under the plan's lock."""
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = _get_workflow_for_user(request, workflow_id)
    comment = request.POST.get("comment", "")[:4000]
    shown = seen.from_form(request)
    return act(
        request,
        lambda: decision(workflow, by=request.user, seen=shown, comment=comment),
        done=f"{done}: {workflow.name}",
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
        stale=lambda _: seen.changed_since(request, workflow.pk, shown),
    )


def _detail_url(workflow: Workflow) -> str:
    return _detail_path(workflow.pk)


def _detail_path(workflow_id: UUID) -> str:
    return reverse("workflow_detail", kwargs={"workflow_id": workflow_id})


def _live(request: HttpRequest, workflow: Workflow) -> HttpResponse:
    workflow.refresh_from_db()
    return render(request, "workflows/workflow_detail.html#live", _detail_context(request, workflow))


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def resolve_step(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    if not roles.is_operator(request.user):
        raise PermissionDenied
    workflow = _get_workflow_for_user(request, workflow_id)
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
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def confirm_resolution(request: HttpRequest, workflow_id: UUID, step_key: str) -> HttpResponse:
    if not (roles.is_reviewer(request.user) or roles.is_operator(request.user)):
        raise PermissionDenied
    workflow = _get_workflow_for_user(request, workflow_id)
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
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def cancel(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    workflow = _get_workflow_for_user(request, workflow_id)
    # Who may cancel depends on the status; the operation checks again under its lock.
    if workflow.status in cancellation.CANCELLABLE and not cancellation.may_cancel(workflow, request.user):
        raise PermissionDenied
    return act(
        request,
        lambda: cancellation.cancel(workflow, by=request.user, reason=request.POST.get("reason", "")),
        done=f"Cancelled: {workflow.name}",
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
    )


@login_required
@require_http_methods(["GET", "POST"])
@needs_recent_sign_in(back="workflow_revise")
def revise(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    """Edit the arguments of a plan's steps: the form, and its POST, which
    makes the next revision (`operations.revisions`)."""
    workflow = _get_workflow_for_user(request, workflow_id)
    if not roles.is_reviewer(request.user) or persons.same(request.user, workflow.submitted_by_id):
        raise PermissionDenied
    steps = revisions.editable_steps(workflow)
    forms = [{"step": step, "inputs": editing.inputs(step.key, step.action, step.args)} for step in steps]
    problem, status = "", 200
    if request.method == "POST":
        edits, ok = [], True
        for form in forms:
            args, parsed = editing.parse(form["inputs"], request.POST)
            ok = ok and parsed
            if args != form["step"].args:
                edits.append((form, args))
        comment = request.POST.get("comment", "")[:4000]
        if not ok:
            problem, status = "Some fields need fixing: nothing was saved.", 400
        elif not edits:
            problem, status = "Nothing changed: edit an argument first.", 400
        else:
            try:
                revised = revisions.revise(
                    workflow,
                    by=request.user,
                    comment=comment,
                    revision=seen.from_form(request).revision,
                    steps=[{"key": form["step"].key, "args": args} for form, args in edits],
                )
            except DomainError as exc:
                problem, status = exc.message, 400 if exc.status == 400 else exc.status
                _place_errors(exc.fields or {}, [form for form, _ in edits])
            else:
                messages.success(
                    request,
                    f"Saved revision {revised.revision}. As its co-author you cannot "
                    "approve it: another reviewer does.",
                )
                return redirect(_detail_url(workflow))
    # A form sent back with an error keeps the revision it was made from:
    # resending it must not edit a revision its editor never saw.
    edited = seen.from_form(request).revision if request.method == "POST" else workflow.revision
    return render(
        request,
        "workflows/revise.html",
        {
            "workflow": workflow,
            "forms": forms,
            "problem": problem,
            "edited_revision": edited,
            "comment": request.POST.get("comment", "") if request.method == "POST" else "",
        },
        status=status,
    )


def _place_errors(fields: dict[str, str], edited: list[dict]) -> None:
    """Put `steps.<i>.args.<argument>…` errors on the inputs of the edited step i."""
    for path, message in fields.items():
        parts = path.split(".")
        if len(parts) >= 4 and parts[0] == "steps" and parts[1].isdigit() and parts[2] == "args":
            index = int(parts[1])
            if index < len(edited):
                for item in edited[index]["inputs"]:
                    if item.argument == parts[3] and not item.error:
                        item.error = message if len(parts) == 4 else f"{'.'.join(parts[4:])}: {message}"


def _claiming(request: HttpRequest, workflow_id: UUID, operation, done: str) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = _get_workflow_for_user(request, workflow_id)
    return act(
        request,
        lambda: operation(workflow),
        done=done,
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
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
    return _claiming(
        request, workflow_id, lambda workflow: claims.assign(workflow, by=request.user, to=to), f"Assigned to {to}."
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def approve(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    return _decide(request, workflow_id, approvals.approve, "Approved")


@login_required
@require_POST
def retake_previews(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied
    workflow = _get_workflow_for_user(request, workflow_id)
    return act(
        request,
        lambda: approvals.retake_previews(workflow, by=request.user),
        done="A worker is taking the previews again.",
        back=_detail_url(workflow),
        partial=lambda: _live(request, workflow),
    )


@login_required
@require_POST
@needs_recent_sign_in(back=lambda workflow_id, **_: _detail_path(workflow_id))
def reject(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    return _decide(request, workflow_id, approvals.reject, "Rejected")


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok"})
