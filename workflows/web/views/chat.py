"""Slack's side door (docs/explanation/chat-decisions.md#chat-decisions): the
interactions endpoint Slack posts clicks to, and the page that finishes a
Slack user's linking handshake."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from workflows.operations import chat_clicks, chat_links
from workflows.web.auth import ask_to_sign_in_again, signed_in_recently


@csrf_exempt  # posted by Slack, server to server: its signature is the proof
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    """Verify, then acknowledge at once: the worker decides and answers on
    the click's response_url. A refusal says why and changes nothing."""
    if not (settings.SLACK_SIGNING_SECRET and settings.SLACK_TEAM_ID):
        return _text("Slack interactions are off: SLACK_SIGNING_SECRET and SLACK_TEAM_ID are unset.", 404)
    if request.content_type != "application/x-www-form-urlencoded":
        # As Slack posts; a multipart body would be read as a form before its raw bytes could be verified.
        return _text("Interactions are posted as application/x-www-form-urlencoded.", 400)
    signature = request.headers.get("X-Slack-Signature")
    try:
        sent_at = chat_clicks.verify(request.body, request.headers.get("X-Slack-Request-Timestamp"), signature)
        interaction = chat_clicks.read(request.POST.get("payload"))
        chat_clicks.receive(interaction, signature, sent_at)
    except chat_clicks.ClickRefused as refused:
        return _text(refused.message, refused.status)
    return HttpResponse(status=200)


def _text(message: str, status: int) -> HttpResponse:
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


@login_required
@require_http_methods(["GET", "POST"])
def slack_link(request: HttpRequest, token: str) -> HttpResponse:
    """The handshake's page: it shows which Slack user would be linked to
    the signed-in account; only its POST (CSRF, a recent sign-in) links."""
    try:
        handshake = chat_links.check(token)
        if request.method == "POST":
            if not signed_in_recently(request):
                return ask_to_sign_in_again(request, request.path)
            chat_links.confirm(token, request.user)
            return render(request, "workflows/slack_link.html", {"handshake": handshake, "linked": True})
    except chat_links.SlackLinkRefused as refused:
        return render(request, "workflows/slack_link.html", {"refused": refused.message}, status=refused.status)
    return render(request, "workflows/slack_link.html", {"handshake": handshake})
