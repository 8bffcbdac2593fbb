"""Signing out, here and at the identity provider (docs/explanation/decisions.md#bound-decisions).

- `POST /logout/` (CSRF-checked; a GET or a cross-site form signs nobody
  out) ends the session; for an SSO session it then sends the browser on to
  the provider's `end_session_endpoint`, when its discovery document names
  one, so the provider's session ends too (OpenID Connect RP-Initiated
  Logout).
- `POST /oidc/backchannel-logout/` is the provider telling us that a person
  signed out or was removed there (OpenID Connect Back-Channel Logout 1.0):
  the logout token is checked like an ID token (signature by the provider's
  JWKS, issuer, audience, issue time) plus the logout event, a `sub` or
  `sid`, and no `nonce`; then that person's sessions end and their agents'
  tokens stop (workflows.operations.sessions). Anything else is a 400.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

import jwt
from django.conf import settings
from django.contrib import auth
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from workflows.operations import sessions
from workflows.web import sso
from workflows.web.identity import SSO_SESSION_KEY

log = logging.getLogger(__name__)

LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    was_sso = isinstance(request.session.get(SSO_SESSION_KEY), dict)
    auth.logout(request)
    after = reverse(settings.LOGOUT_REDIRECT_URL)
    if not (was_sso and settings.OIDC_ISSUER):
        return redirect(after)
    try:
        end_session = sso.discovery().get("end_session_endpoint")
    except sso.ProviderUnavailable as exc:
        # Signed out here; the provider's session cannot be ended now.
        log.warning("sign-out at the identity provider skipped: %s", exc)
        return redirect(after)
    if not isinstance(end_session, str) or not end_session.startswith(("https://", "http://")):
        return redirect(after)
    query = {"client_id": settings.OIDC_CLIENT_ID, "post_logout_redirect_uri": request.build_absolute_uri(after)}
    url = f"{end_session}{'&' if '?' in end_session else '?'}{urlencode(query)}"
    # A page that goes on by itself, not a redirect: browsers hold a form's
    # redirect to the page's CSP `form-action` ('self'), and the provider is
    # another origin.
    return render(request, "workflows/signed_out.html", {"end_session_url": url})


class LogoutTokenInvalid(Exception):
    pass


def _claims(token: str) -> dict:
    """The logout token's claims, once everything about it is checked."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise LogoutTokenInvalid("The logout token is not a valid JWT.") from None
    alg = header.get("alg")
    if not sso.accepted(alg):
        raise LogoutTokenInvalid(f"The logout token is signed with {str(alg)[:20]!r}, which is not accepted.")
    try:
        claims = sso.decode(token, alg, ["iss", "aud", "iat"])
    except sso.SignInRefused as exc:
        raise LogoutTokenInvalid(str(exc).replace("ID token", "logout token")) from None
    except jwt.PyJWTError as exc:
        raise LogoutTokenInvalid(sso.refusal(exc, "logout token")) from None
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(LOGOUT_EVENT), dict):
        raise LogoutTokenInvalid(f"The logout token's events claim does not hold {LOGOUT_EVENT}.")
    if "nonce" in claims:
        raise LogoutTokenInvalid("A logout token carries no nonce (this looks like an ID token).")
    for name in ("sub", "sid"):
        if name in claims and (not isinstance(claims[name], str) or not claims[name] or len(claims[name]) > 255):
            raise LogoutTokenInvalid(f"The logout token's {name} is not usable.")
    if not claims.get("sub") and not claims.get("sid"):
        raise LogoutTokenInvalid("The logout token names neither a subject (sub) nor a session (sid).")
    return claims


def _no_store(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


@csrf_exempt  # called by the provider, server to server: the signed token is the proof
@require_POST
def backchannel_logout(request: HttpRequest) -> HttpResponse:
    if not settings.OIDC_ISSUER:
        raise Http404("Sign-in with an identity provider is not configured.")
    token = request.POST.get("logout_token", "")
    try:
        if not token:
            raise LogoutTokenInvalid("The request has no logout_token.")
        claims = _claims(token)
    except LogoutTokenInvalid as exc:
        log.warning("back-channel logout refused: %s", exc)
        return _no_store(JsonResponse({"error": "invalid_request", "error_description": str(exc)}, status=400))
    except sso.ProviderUnavailable as exc:
        log.warning("back-channel logout: identity provider unavailable: %s", exc)
        return _no_store(JsonResponse({"error": "temporarily_unavailable", "error_description": str(exc)}, status=503))
    outcome = sessions.signed_out_at_provider(
        issuer=claims["iss"], subject=claims.get("sub") or "", sid=claims.get("sid") or "", via="backchannel-logout"
    )
    return _no_store(JsonResponse(outcome or {"sessions_ended": 0, "tokens_suspended": 0}))
