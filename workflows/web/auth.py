"""Local sign-in (username and password, throttled by django-axes), and the
rule that a decision needs a recent sign-in.

Only requests can be throttled: a credential check made in code without a
request (the test client, a management command) is not a login attempt from
anywhere, so it passes through to the next backend instead of failing.
LOCAL_LOGIN=0 turns local passwords off everywhere (the login page, the
admin's); SSO (workflows.web.sso) is then the only way in, but for a local
account granted break-glass (`manage.py breakglass USER --hours N`), whose
every sign-in is audited.

A session lasts at most SESSION_MAX_AGE from its sign-in, local or SSO,
however often the provider renewed it (`SessionLimit`). After any sign-in,
`next` is followed only to a path of this site (`local_path`).
"""

from __future__ import annotations

import time
from functools import wraps
from urllib.parse import urlencode, urlsplit

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from workflows.audit import journal
from workflows.operations import sessions

# When this session's person last signed in (seconds since the epoch; for
# an SSO session, when they last authenticated at the provider): a decision
# needs a sign-in younger than DECISION_MAX_AUTH_AGE.
SIGNED_IN_AT = "durableconsole.signed_in_at"
# When this session began (seconds since the epoch): a silent renewal at the
# provider keeps it, so no session outlives SESSION_MAX_AGE.
SESSION_STARTED = "durableconsole.session_started"
PASSWORDS = "workflows.web.auth.LocalPasswords"


def local_path(url) -> str:
    """`url` if it is a path of this site, else "": never another host, in
    any spelling browsers accept (`//host`, `/\\host`, `https:host`)."""
    if not isinstance(url, str) or not url.startswith("/") or url.startswith(("//", "/\\")):
        return ""
    if any(ord(char) < 32 or ord(char) == 127 for char in url):
        return ""
    parts = urlsplit(url.replace("\\", "/"))
    return "" if parts.scheme or parts.netloc else url


def remember_sign_in(sender, request, user, **kwargs):
    """`user_logged_in` receiver (connected in `WorkflowsConfig.ready`). An
    SSO sign-in then sets the provider's `auth_time` (workflows.web.sso). A
    password sign-in while LOCAL_LOGIN is off is a break-glass one: audited."""
    if request is not None and hasattr(request, "session"):
        request.session[SIGNED_IN_AT] = request.session[SESSION_STARTED] = int(time.time())
    if not settings.LOCAL_LOGIN and getattr(user, "backend", "") == PASSWORDS:
        until = sessions.breakglass_until(user.get_username())
        with transaction.atomic():
            journal.append(
                actor=user,
                verb="user.signed_in",
                obj_type="user",
                obj_id=user.pk,
                data={"via": "breakglass", "until": until.isoformat() if until else None},
            )


def _passwords_allowed(username) -> bool:
    return settings.LOCAL_LOGIN or (isinstance(username, str) and sessions.breakglass_until(username) is not None)


class ThrottledLogins(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or not _passwords_allowed(username):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class LocalPasswords(ModelBackend):
    """Django's own password check, while LOCAL_LOGIN is on (or the account
    holds a running break-glass grant)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not _passwords_allowed(username):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class SessionLimit:
    """Ends a session SESSION_MAX_AGE after it began (a session from before
    this rule, with no start, ends too): the person signs in again."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if request.user.is_authenticated:
            started = request.session.get(SESSION_STARTED)
            if not isinstance(started, int) or time.time() - started > settings.SESSION_MAX_AGE:
                auth.logout(request)
        return self.get_response(request)


class SignIn(auth_views.LoginView):
    """The login page: the password form (LOCAL_LOGIN=1) and the identity
    provider's button (OIDC_ISSUER set). With local sign-in off, a password
    POST is refused before any credential is looked at, unless its account
    holds a break-glass grant (`?breakglass=1` shows the form)."""

    template_name = "workflows/login.html"

    def post(self, request, *args, **kwargs):
        if not _passwords_allowed(request.POST.get("username")):
            return render(
                request,
                "workflows/sign_in_problem.html",
                {
                    "title": "Password sign-in is off",
                    "message": "This console signs people in only through the identity provider (LOCAL_LOGIN=0).",
                    "sign_in_again": True,
                },
                status=403,
            )
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        if settings.OIDC_ISSUER:
            query = {
                key: value
                for key, value in (
                    ("next", context.get("next", "")),
                    ("reauth", "1" if self.request.GET.get("reauth") else ""),
                )
                if value
            }
            context["sso_url"] = reverse("oidc_authentication_init") + (f"?{urlencode(query)}" if query else "")
        context["breakglass"] = not settings.LOCAL_LOGIN and bool(self.request.GET.get("breakglass"))
        context["local_login"] = settings.LOCAL_LOGIN or context["breakglass"]
        return context

    def get_redirect_url(self):
        return local_path(super().get_redirect_url())


def signed_in_recently(request: HttpRequest) -> bool:
    at = request.session.get(SIGNED_IN_AT)
    return isinstance(at, int) and time.time() - at <= settings.DECISION_MAX_AUTH_AGE


def ask_to_sign_in_again(request: HttpRequest, back: str) -> HttpResponse:
    """To the login page, which sends the person back to `back` (a page, not
    the POST that was refused), asking the provider to make them sign in again."""
    hours = settings.DECISION_MAX_AUTH_AGE / 3600
    span = "hour" if hours == 1 else f"{hours:g} hours"
    messages.warning(request, f"Sign in again to decide: a decision needs a sign-in from the last {span}.")
    login = f"{reverse(settings.LOGIN_URL)}?{urlencode({REDIRECT_FIELD_NAME: back, 'reauth': '1'})}"
    if request.headers.get("HX-Request") == "true":
        response = HttpResponse(status=204)
        response["HX-Redirect"] = login
        return response
    return redirect(login)


def needs_recent_sign_in(back):
    """For a view that decides (docs/explanation/decisions.md#bound-decisions: every decision made through a
    session): without a sign-in younger than DECISION_MAX_AUTH_AGE, nothing
    is decided and the person is asked to sign in again. Only a POST
    decides; a GET (the form) is let through. `back` is the page to return
    to: a URL name, reversed with the view's arguments, or a function of them."""

    def decorate(view):
        @wraps(view)
        def checked(request: HttpRequest, *args, **kwargs):
            if request.method == "POST" and request.user.is_authenticated and not signed_in_recently(request):
                page = back(**kwargs) if callable(back) else reverse(back, kwargs=kwargs)
                return ask_to_sign_in_again(request, page)
            return view(request, *args, **kwargs)

        return checked

    return decorate
