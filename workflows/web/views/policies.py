"""The console's action policies: each action's rules and limits, its steps
in flight, and changes to them.

Operators change a policy; a change that only tightens applies at once, a
loosening waits for another operator, who authorizes or declines it here.
Auditors may look. The rules (who may decide, what counts as tightening,
stale requests) live in `workflows.operations.policies`; these views parse
the form and report the outcome.
"""

from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from workflows import actions, roles
from workflows.engine import limits
from workflows.errors import DomainError
from workflows.models import ActionPolicy, PolicyChange
from workflows.operations import policies
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act, reads


class PolicyForm(forms.Form):
    """Every editable field, as the page shows it; empty means none (no limit,
    no approval lifetime). Bounds are checked by `policies.clean`."""

    enabled = forms.BooleanField(required=False)
    risk = forms.ChoiceField(choices=ActionPolicy.Risk.choices)
    approvals_required = forms.IntegerField()
    approval_ttl_seconds = forms.IntegerField(required=False)
    max_attempts = forms.IntegerField()
    max_in_flight = forms.IntegerField(required=False)
    rate_per_second = forms.FloatField(required=False)
    review_deadline_seconds = forms.IntegerField(required=False)
    review_reminder_seconds = forms.IntegerField(required=False)
    escalation_group = forms.CharField(required=False, max_length=150, empty_value=None)
    reviewer_group = forms.CharField(
        required=False,
        max_length=150,
        label="Reviewer group",
        help_text="Only its members may approve a plan using this action; empty: any reviewer of the plan's team.",
    )
    chat_decisions = forms.BooleanField(
        required=False,
        label="Decisions in chat",
        help_text="Off: plans using this action offer only Open in Slack, and are decided in the console.",
    )
    # Checked by the operation, with the words every reason is refused in.
    reason = forms.CharField(required=False, strip=False)
    version = forms.IntegerField(widget=forms.HiddenInput)


def _get_policy(request: HttpRequest, name: str) -> ActionPolicy:
    reads(request, "policies")
    try:
        return policies.get(name, reader=request.user)
    except policies.UnknownAction:
        raise Http404("No such action.") from None


def _detail_context(request: HttpRequest, rules: ActionPolicy, form: PolicyForm | None = None) -> dict:
    if form is None:
        initial = {name: getattr(rules, name) for name in policies.EDITABLE}
        form = PolicyForm(initial={**initial, "version": rules.version})
    return {
        "policy": rules,
        "state": limits.state(rules.action),
        "form": form,
        "pending": [
            {
                "change": change,
                "can_decide": roles.is_operator(request.user) and change.requested_by_id != request.user.pk,
            }
            for change in policies.pending(rules.action)
        ],
        "recent": PolicyChange.objects.filter(action=rules.action)
        .exclude(status="PENDING")
        .select_related("requested_by", "decided_by")
        .order_by("-created_at")[:10],
        "can_change": roles.is_operator(request.user),
    }


@login_required
@require_GET
def policy_list(request: HttpRequest) -> HttpResponse:
    reads(request, "policies")
    names = sorted(set(actions.names()) | set(ActionPolicy.objects.values_list("action", flat=True)))
    current = policies.engine_policy.policies_for(names)
    shown = set(ActionPolicy.objects.visible_to(request.user).filter(action__in=names).values_list("action", flat=True))
    waiting = set(PolicyChange.objects.filter(status="PENDING").values_list("action", flat=True))
    rows = [
        {"policy": current[name], "state": limits.state(name), "pending": name in waiting}
        for name in names
        if name in shown
    ]
    return render(request, "workflows/policy_list.html", {"rows": rows})


@login_required
@require_http_methods(["GET", "POST"])
@needs_recent_sign_in(back="policy_detail")
def policy_detail(request: HttpRequest, name: str) -> HttpResponse:
    rules = _get_policy(request, name)
    if request.method == "GET":
        return render(request, "workflows/policy_detail.html", _detail_context(request, rules))
    if not roles.is_operator(request.user):
        raise PermissionDenied("Only operators can change an action's policy.")
    form = PolicyForm(request.POST)
    if form.is_valid():
        data = dict(form.cleaned_data)
        reason, version = data.pop("reason"), data.pop("version")
        try:
            result = policies.change(name, by=request.user, reason=reason, changes=data, version=version)
        except DomainError as exc:
            for field, message in (exc.fields or {}).items():
                form.add_error(field if field in form.fields else None, message)
            if not exc.fields:
                form.add_error(None, exc.message)
            return render(
                request, "workflows/policy_detail.html", _detail_context(request, rules, form), status=exc.status
            )
        if result.request is not None:
            messages.success(request, "This change loosens the policy: it is waiting for a second operator.")
        elif result.applied:
            messages.success(request, f"Applied: {name} is at policy version {result.policy.version}.")
        else:
            messages.info(request, "Nothing changed.")
        return redirect("policy_detail", name=name)
    return render(request, "workflows/policy_detail.html", _detail_context(request, rules, form), status=400)


def _change_page(change_id: UUID) -> str:
    """The page of the action (or the Cedar policy set) a policy change is about."""
    action, policy_set = PolicyChange.objects.filter(pk=change_id).values_list(
        "action", "policy_set_version__policy_set__name"
    ).first() or ("", None)
    if policy_set:
        return reverse("policy_set_detail", kwargs={"team": policy_set})
    return reverse("policy_detail", kwargs={"name": action}) if action else reverse("policy_list")


def _decide(request: HttpRequest, change_id: UUID, decision, done: str) -> HttpResponse:
    if (
        not roles.is_operator(request.user)
        and not PolicyChange.objects.filter(pk=change_id, policy_set_version__isnull=False).exists()
    ):
        raise PermissionDenied("Only operators can decide on a policy change.")
    change = get_object_or_404(
        PolicyChange.objects.visible_to(request.user).select_related("requested_by"), pk=change_id
    )
    if change.policy_set_version_id is not None:
        # A reviewer of the team decides (`policy_sets.authorize` checks who).
        return act(
            request,
            lambda: decision(change, by=request.user, reason=request.POST.get("reason", "")),
            done=f"{done}: policy set version",
            back=_change_page(change.pk),
            partial=lambda: redirect(_change_page(change.pk)),
        )

    def pending() -> HttpResponse:
        return render(
            request,
            "workflows/policy_detail.html#pending",
            _detail_context(request, _get_policy(request, change.action)),
        )

    return act(
        request,
        lambda: decision(change, by=request.user, reason=request.POST.get("reason", "")),
        done=f"{done}: policy change of {change.action}",
        back=reverse("policy_detail", kwargs={"name": change.action}),
        partial=pending,
    )


@login_required
@require_POST
@needs_recent_sign_in(back=_change_page)
def policy_change_authorize(request: HttpRequest, change_id: UUID) -> HttpResponse:
    return _decide(request, change_id, policies.authorize, "Authorized and applied")


@login_required
@require_POST
@needs_recent_sign_in(back=_change_page)
def policy_change_decline(request: HttpRequest, change_id: UUID) -> HttpResponse:
    return _decide(request, change_id, policies.decline, "Declined")
