"""Deciding from a review link (`operations.links`): the link's page shows
the plan and its previews and asks for confirmation; only that page's POST
decides. Sign-in comes first when needed (the login page sends the
reviewer back to the link, a local path it checks)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from workflows.errors import DomainError
from workflows.operations import links
from workflows.web import seen
from workflows.web.auth import ask_to_sign_in_again, signed_in_recently
from workflows.web.views.detail import detail_url
from workflows.web.views.plans import with_review_facts


@login_required
@require_http_methods(["GET", "POST"])
def review_link(request: HttpRequest, token: str) -> HttpResponse:
    try:
        link = links.check(token, request.user)
    except links.LinkRefused as refused:
        return render(request, "workflows/review_link.html", {"refused": refused.message}, status=refused.status)
    if request.method == "POST":
        if not signed_in_recently(request):
            return ask_to_sign_in_again(request, request.path)
        try:
            links.decide(
                token,
                request.user,
                comment=request.POST.get("comment", "")[:4000],
                preview_digests=seen.previews_shown(request),
            )
        except DomainError as exc:
            messages.error(request, exc.message)
            return redirect(request.path)
        done = "Approved" if link.decision == "approve" else "Rejected"
        messages.success(request, f"{done}: {link.workflow.name}")
        return redirect(detail_url(link.workflow))
    workflow = with_review_facts([link.workflow])[0]
    return render(request, "workflows/review_link.html", {"link": link, "workflow": workflow})
