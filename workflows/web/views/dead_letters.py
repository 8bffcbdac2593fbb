"""The operators' dead-letter console: list, inspect, replay, discard.

Operators resolve entries; auditors may look but never act. Every change
goes through the named operations in `workflows.operations.deadletters`, which recheck
current policy and decide races in the database; these views only choose
the entries, show the preview and report the outcome.
"""

from collections import defaultdict
from urllib.parse import urlencode
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from workflows import roles
from workflows.ages import AgeInvalid, parse_age
from workflows.errors import DomainError
from workflows.models import DeadLetter
from workflows.operations import deadletters
from workflows.reasons import clean_reason
from workflows.states import FailureClass
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act, list_page, reads

PAGE_SIZE = 50
ALL_STATUSES = "all"


class AgeField(forms.ChoiceField):
    """Offers a few ages, and takes any other of the one grammar (a link
    may carry `age=90d`): it is then offered too, so the page shows the
    filter it applies."""

    def __init__(self, **kwargs):
        super().__init__(
            choices=[("", "Any age")] + [(age, f"Older than {age}") for age in ("5m", "1h", "1d")], **kwargs
        )

    def validate(self, value):
        if value:
            try:
                parse_age(value)
            except AgeInvalid as exc:
                raise forms.ValidationError(exc.message) from None

    def offer(self, value) -> None:
        if value and value not in dict(self.choices):
            self.choices = [*self.choices, (value, f"Older than {value}")]


class DeadLetterFilter(forms.Form):
    """The list's GET filter; its action, failure class and age also define
    a bulk selection ("all matching this filter")."""

    status = forms.ChoiceField(
        required=False,
        # OPEN first: an empty value means OPEN, and the browser shows the first option.
        choices=[(value, value.title()) for value in DeadLetter.Status.values] + [(ALL_STATUSES, "All")],
    )
    action = forms.ChoiceField(required=False)
    failure_class = forms.ChoiceField(
        required=False, label="Failure class", choices=[("", "Any")] + FailureClass.choices
    )
    age = AgeField(required=False)

    def __init__(self, data, user):
        super().__init__(data, label_suffix="")
        present = DeadLetter.objects.visible_to(user).order_by("action").values_list("action", flat=True).distinct()
        self.fields["action"].choices = [("", "Any")] + [(name, name) for name in present]
        self.is_valid()
        self.fields["age"].offer(self.cleaned_data.get("age"))

    def value(self, name: str) -> str:
        """The cleaned value; an invalid one counts as unset (its error is shown)."""
        return self.cleaned_data.get(name) or ""

    @property
    def current(self) -> dict[str, str]:
        return {name: self.value(name) for name in self.fields}

    @property
    def status_value(self) -> str:
        return self.value("status") or DeadLetter.Status.OPEN

    def selection(self) -> dict:
        return {
            "action": self.value("action"),
            "failure_class": self.value("failure_class"),
            "older_than": parse_age(self.value("age")) if self.value("age") else None,
        }

    def apply(self, entries):
        status = None if self.status_value == ALL_STATUSES else self.status_value
        return entries.chosen(status=status, **self.selection())

    def querystring(self) -> str:
        return urlencode({name: value for name, value in self.current.items() if value})


def _check_resolver(user) -> None:
    """Of those who see a dead letter (`DeadLetter.objects.visible_to`), only operators resolve it."""
    if not roles.is_operator(user):
        raise PermissionDenied("Only operators can resolve dead letters.")


def _get_dead_letter_for_user(request: HttpRequest, dead_letter_id: UUID, *, resolve: bool = False) -> DeadLetter:
    """403 for a role that reads no dead letters, 404 for one the user does not
    see; then 403 to resolve it unless an operator."""
    reads(request, "dead_letters")
    entry = get_object_or_404(
        DeadLetter.objects.visible_to(request.user).select_related("workflow", "trace", "resolved_by"),
        pk=dead_letter_id,
    )
    if resolve:
        _check_resolver(request.user)
    return entry


def list_url(filters: DeadLetterFilter) -> str:
    query = filters.querystring()
    return reverse("dead_letter_list") + (f"?{query}" if query else "")


@login_required
@require_GET
@vary_on_headers("HX-Request")
def dead_letter_list(request: HttpRequest) -> HttpResponse:
    reads(request, "dead_letters")
    filters = DeadLetterFilter(request.GET, request.user)
    entries = filters.apply(DeadLetter.objects.visible_to(request.user).select_related("workflow"))
    return list_page(
        request,
        entries,
        "workflows/dead_letter_list.html",
        rows="entries",
        page_size=PAGE_SIZE,
        context={
            "filters": filters,
            "query": filters.querystring(),
            "can_select": roles.is_operator(request.user) and filters.status_value == DeadLetter.Status.OPEN,
        },
    )


def _detail_context(request: HttpRequest, dead_letter: DeadLetter) -> dict:
    (preview,) = deadletters.preview([dead_letter])
    return {
        "dead_letter": dead_letter,
        "trace": dead_letter.trace,
        "preview": preview,
        "can_resolve": roles.is_operator(request.user) and dead_letter.status == DeadLetter.Status.OPEN,
    }


@login_required
@require_GET
def dead_letter_detail(request: HttpRequest, dead_letter_id: UUID) -> HttpResponse:
    dead_letter = _get_dead_letter_for_user(request, dead_letter_id)
    return render(request, "workflows/dead_letter_detail.html", _detail_context(request, dead_letter))


def _resolve(request: HttpRequest, dead_letter_id: UUID, operation, done: str) -> HttpResponse:
    dead_letter = _get_dead_letter_for_user(request, dead_letter_id, resolve=True)

    def detail() -> HttpResponse:
        fresh = _get_dead_letter_for_user(request, dead_letter_id, resolve=True)
        return render(request, "workflows/dead_letter_detail.html#detail", _detail_context(request, fresh))

    return act(
        request,
        lambda: operation(dead_letter, by=request.user, reason=request.POST.get("reason", "")),
        done=f"{done}: {dead_letter.step_key} ({str(dead_letter.pk)[:8]})",
        back=reverse("dead_letter_detail", kwargs={"dead_letter_id": dead_letter.pk}),
        partial=detail,
    )


@login_required
@require_POST
@needs_recent_sign_in(back="dead_letter_detail")
def dead_letter_replay(request: HttpRequest, dead_letter_id: UUID) -> HttpResponse:
    return _resolve(request, dead_letter_id, deadletters.replay, "Replayed")


@login_required
@require_POST
@needs_recent_sign_in(back="dead_letter_detail")
def dead_letter_discard(request: HttpRequest, dead_letter_id: UUID) -> HttpResponse:
    return _resolve(request, dead_letter_id, deadletters.discard, "Discarded")


def posted_ids(request: HttpRequest) -> list[UUID]:
    ids = []
    for value in request.POST.getlist("ids"):
        try:
            ids.append(UUID(value))
        except ValueError:
            continue
    return ids


def _render_bulk_preview(request: HttpRequest, entries: list[DeadLetter], back: str, status: int = 200) -> HttpResponse:
    previews = deadletters.preview(entries)
    return render(
        request,
        "workflows/dead_letter_bulk_preview.html",
        {
            "previews": previews,
            "blocked": sum(1 for preview in previews if not preview.will_run),
            "capped": len(entries) >= deadletters.MAX_BULK,
            "max_bulk": deadletters.MAX_BULK,
            "back": back,
        },
        status=status,
    )


@login_required
@require_POST
def dead_letter_bulk_preview(request: HttpRequest) -> HttpResponse:
    """Turn ticked rows, or the list's filter, into an explicit list of ids
    to confirm: the replay then acts on exactly what was previewed."""
    _check_resolver(request.user)
    filters = DeadLetterFilter(request.POST, request.user)
    back = list_url(filters)
    if filters.errors:
        # Dropping a bad field would widen the selection; refuse instead.
        messages.error(request, "The filter is not valid; choose it again.")
        return redirect(back)
    try:
        if request.POST.get("scope") == "filter":
            entries = list(deadletters.select(request.user, **filters.selection()))
        else:
            entries = list(deadletters.select(request.user, ids=posted_ids(request)))
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    if not entries:
        messages.error(request, "No open dead letters match this selection.")
        return redirect(back)
    return _render_bulk_preview(request, entries, back)


@login_required
@require_POST
@needs_recent_sign_in(back="dead_letter_list")
def dead_letter_bulk_replay(request: HttpRequest) -> HttpResponse:
    _check_resolver(request.user)
    ids = posted_ids(request)
    back = reverse("dead_letter_list")
    try:
        entries = list(deadletters.select(request.user, ids=ids))
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    try:
        # Checked before the entries, so a refused reason is reported once rather than once per entry.
        reason = clean_reason(request.POST.get("reason"))
    except DomainError as exc:
        messages.error(request, exc.message)
        return _render_bulk_preview(request, entries, back)
    try:
        done, refused = deadletters.replay_many(entries, by=request.user, reason=reason)
    except DomainError as exc:
        messages.error(request, exc.message)
        return _render_bulk_preview(request, entries, back, status=exc.status)
    refusals = [(entry.pk, why) for entry, why in refused]
    selected = {entry.pk for entry in entries}
    refusals += [(pk, "It is no longer open.") for pk in dict.fromkeys(ids) if pk not in selected]
    messages.success(request, f"Replayed {len(done)}, refused {len(refusals)}.")
    by_reason = defaultdict(list)
    for pk, why in refusals:
        by_reason[why].append(str(pk)[:8])
    for why, short_ids in by_reason.items():
        listed = ", ".join(short_ids[:10]) + (f" and {len(short_ids) - 10} more" if len(short_ids) > 10 else "")
        messages.error(request, f"Refused {len(short_ids)} ({listed}): {why}")
    return redirect(back)
