"""What a console form says its decider saw (`operations.deciding.Seen`):
the hidden fields every decision form carries, read back, and the answer to
a stale page's decision."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from workflows.operations.deciding import Seen


def _revision(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) < 10 else None


def previews_shown(request: HttpRequest, suffix: str = "") -> dict[str, str] | None:
    """`{step key: digest}` of the previews the page showed (`key=digest`
    fields); None from a form that did not carry them."""
    if not request.POST.get(f"previews_shown{suffix}"):
        return None
    shown = {}
    for item in request.POST.getlist(f"preview{suffix}"):
        key, _, digest = item.rpartition("=")
        shown[key] = digest
    return shown


def from_form(request: HttpRequest, suffix: str = "") -> Seen:
    """The plan as the page showed it; a field the form left out is None,
    which the decision refuses by name. A form deciding several plans names
    each plan's fields with its own `suffix` (`-<workflow id>`)."""
    return Seen(
        revision=_revision(request.POST.get(f"revision{suffix}")),
        plan_hash=request.POST.get(f"plan_hash{suffix}") or None,
        preview_digests=previews_shown(request, suffix),
        results_digest=request.POST.get(f"results_digest{suffix}") or None,
    )


def changed_since(request: HttpRequest, workflow_id, seen: Seen) -> HttpResponse:
    """A stale page's decision: to the page of what changed since the
    revision it showed, with a decision form for the current one."""
    url = reverse("workflow_changed", kwargs={"workflow_id": workflow_id})
    url += f"?seen={seen.revision}" if seen.revision is not None else ""
    if request.htmx:
        answer = HttpResponse(status=204)
        answer["HX-Redirect"] = url
        return answer
    return redirect(url)
