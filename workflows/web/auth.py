"""Local sign-in (username and password, throttled by django-axes), and the
rule that a decision needs a recent sign-in.

Only requests can be throttled: a credential check made in code without a
request (the test client, a management command) is not a login attempt from
anywhere, so it passes through to the next backend instead of failing.
LOCAL_LOGIN=0 turns local passwords off everywhere (the login page, the
admin's); SSO (workflows.web.sso) is then the only way in.
"""

from __future__ import annotations

import time
from functools import wraps
from urllib.parse import urlencode

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

# When this session's person last signed in (seconds since the epoch; for
# an SSO session, when they last authenticated at the provider): a decision
# needs a sign-in younger than DECISION_MAX_AUTH_AGE.
SIGNED_IN_AT = "durableconsole.signed_in_at"


def remember_sign_in(sender, request, user, **kwargs):
    """`user_logged_in` receiver (connected in `WorkflowsConfig.ready`). An
    SSO sign-in then sets the provider's `auth_time` (workflows.web.sso)."""
    if request is not None and hasattr(request, "session"):
        request.session[SIGNED_IN_AT] = int(time.time())


class ThrottledLogins(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or not settings.LOCAL_LOGIN:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class LocalPasswords(ModelBackend):
    """Django's own password check, while LOCAL_LOGIN is on."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not settings.LOCAL_LOGIN:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class SignIn(auth_views.LoginView):
    """The login page: the password form (LOCAL_LOGIN=1) and the identity
    provider's button (OIDC_ISSUER set). With local sign-in off, a password
    POST is refused before any credential is looked at."""

    template_name = "workflows/login.html"

    def post(self, request, *args, **kwargs):
        if not settings.LOCAL_LOGIN:
            return render(request, "workflows/sign_in_problem.html", {
                "title": "Password sign-in is off",
                "message": "This console signs people in only through the identity provider (LOCAL_LOGIN=0).",
                "sign_in_again": True}, status=403)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        if settings.OIDC_ISSUER:
            query = {key: value for key, value in (
                ("next", context.get("next", "")), ("reauth", "1" if self.request.GET.get("reauth") else ""))
                if value}
            context["sso_url"] = reverse("oidc_authentication_init") + (f"?{urlencode(query)}" if query else "")
        context["local_login"] = settings.LOCAL_LOGIN
        return context


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
    """For a view that decides (DESIGN §27: every decision made through a
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
