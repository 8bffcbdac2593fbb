"""Sign-in with the company's identity provider: OpenID Connect through
mozilla-django-oidc (docs/explanation/teams.md#teams; docs/deploying.md#sign-in-sso).

The library runs the authorization-code flow with state, nonce and PKCE
(S256), and renews an SSO session's ID token at the provider when it is due
(SessionRefresh). Around it, this module:

- reads the provider's endpoints from its discovery document, fetched at the
  first sign-in and cached, never at import or settings time; a provider that
  cannot be reached answers with a page that says so, not a server error;
- validates the ID token fully: signature with a key from the provider's
  JWKS (asymmetric algorithms only), issuer, audience (and `azp`, which
  must name this client when there are several audiences or when it is
  there at all), expiry, issue time and nonce; a token that fails is refused
  with its reason, and no session is made;
- finds the account by (issuer, subject) and sets its groups and teams from
  OIDC_ROLE_MAP and OIDC_TEAM_MAP (workflows.operations.identity);
- records when the person last authenticated (`auth_time`), which decisions
  require to be recent (workflows.web.auth), and the provider's session id
  (`sid`), which its back-channel logout may name (workflows.web.signout);
- answers a callback's `?error` only for a sign-in this session started
  (a cross-site request signs nobody out); a silent renewal the provider
  refuses ends the person's sessions and stops their agents' tokens;
- follows `next` after the callback only to a path of this site.
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from mozilla_django_oidc import middleware as oidc_middleware
from mozilla_django_oidc import views as oidc_views
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from workflows import teams
from workflows.operations import identity as provider_identity
from workflows.operations import sessions
from workflows.web.auth import SIGNED_IN_AT, local_path
from workflows.web.identity import SSO_SESSION_KEY

log = logging.getLogger(__name__)

# Asymmetric only: with HS256 the client secret would sign tokens, and
# `none` signs nothing.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
CACHE_SECONDS = 3600
LEEWAY_SECONDS = 30
SCOPES = "openid email profile"
# The states of the silent renewals (prompt=none) this session sent to the provider.
SILENT_STATES = "durableconsole.oidc_silent_states"
# A silent renewal answered with one of these failed at the provider's end,
# not for the person: the session ends, their agents' tokens stay.
PROVIDER_TROUBLE = ("server_error", "temporarily_unavailable")


class ProviderUnavailable(Exception):
    """The provider could not be reached, or answered nonsense."""


class SignInRefused(Exception):
    """The provider's answer does not prove who the person is."""


# --- discovery ----------------------------------------------------------------

_cache: dict[str, tuple[float, dict]] = {}
_cache_lock = threading.Lock()


def _fetch_json(url: str, what: str) -> dict:
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except requests.RequestException as exc:
        reason = (
            f"HTTP {exc.response.status_code}" if getattr(exc, "response", None) is not None else type(exc).__name__
        )
        raise ProviderUnavailable(f"The identity provider's {what} ({url}) could not be read: {reason}.") from None
    except ValueError:
        raise ProviderUnavailable(f"The identity provider's {what} ({url}) is not JSON.") from None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"The identity provider's {what} ({url}) is not a JSON object.")
    return document


def _cached(url: str, what: str, *, refresh: bool = False) -> dict:
    with _cache_lock:
        hit = _cache.get(url)
    if hit and not refresh and time.monotonic() - hit[0] < CACHE_SECONDS:
        return hit[1]
    document = _fetch_json(url, what)
    with _cache_lock:
        _cache[url] = (time.monotonic(), document)
    return document


def forget_provider() -> None:
    """Drop the cached discovery document and keys (tests; a changed issuer)."""
    with _cache_lock:
        _cache.clear()


def discovery() -> dict:
    """The issuer's discovery document, checked: it must name this issuer and
    the endpoints the code flow needs."""
    issuer = settings.OIDC_ISSUER
    document = _cached(f"{issuer}/.well-known/openid-configuration", "discovery document")
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise ProviderUnavailable(
            f"The discovery document at {issuer} names another issuer ({str(document.get('issuer'))[:200]!r})."
        )
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(document.get(name), str) or not document[name].startswith(("https://", "http://")):
            raise ProviderUnavailable(f"The discovery document at {issuer} has no valid {name}.")
    return document


def signing_key(token: str, alg: str):
    """The provider's key for this token (by `kid`), its JWKS read again once
    when the key is not there (the provider rotated its keys)."""
    kid = jwt.get_unverified_header(token).get("kid")
    for refresh in (False, True):
        keys = _cached(discovery()["jwks_uri"], "key set (JWKS)", refresh=refresh).get("keys")
        for jwk in keys if isinstance(keys, list) else []:
            if not isinstance(jwk, dict) or (kid is not None and jwk.get("kid") != kid):
                continue
            if jwk.get("use", "sig") != "sig" or jwk.get("alg", alg) != alg:
                continue
            try:
                return jwt.PyJWK(jwk, algorithm=alg).key
            except jwt.PyJWTError:
                continue
    raise SignInRefused("The ID token's signing key is not in the provider's key set: its signature cannot be checked.")


def accepted(alg) -> bool:
    """Whether a token signed with `alg` may be checked at all: an asymmetric
    algorithm this client knows, and one the provider says it signs with."""
    offered = discovery().get("id_token_signing_alg_values_supported") or ["RS256"]
    return alg in ALGORITHMS and alg in offered


def decode(token: str, alg: str, required: list[str]) -> dict:
    """The claims of a token the provider signed with `alg`, once its
    signature, audience (this client), issuer, times and `required` claims
    are checked; jwt's error says what failed (SignInRefused: no key)."""
    return jwt.decode(
        token,
        signing_key(token, alg),
        algorithms=[alg],
        audience=settings.OIDC_CLIENT_ID,
        issuer=settings.OIDC_ISSUER,
        leeway=LEEWAY_SECONDS,
        options={"require": required},
    )


def refusal(exc: jwt.PyJWTError, token: str) -> str:
    """Why a token the provider signed failed its check, in words; `token`
    names it ("ID token", "logout token")."""
    if isinstance(exc, jwt.InvalidSignatureError):
        return f"The {token}'s signature does not verify with the provider's keys."
    if isinstance(exc, jwt.InvalidAudienceError):
        return f"The {token} was issued for another client (wrong audience)."
    if isinstance(exc, jwt.InvalidIssuerError):
        return f"The {token} was issued by another issuer."
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"The {token} lacks the {exc.claim!r} claim."
    return f"The {token} is not valid: {type(exc).__name__}."


# --- settings as mozilla-django-oidc reads them -------------------------------------


def _setting(name: str, *default):
    """mozilla-django-oidc's setting names, answered from ours (docs/reference/settings.md#settings)."""
    ours = {
        "OIDC_RP_CLIENT_ID": lambda: settings.OIDC_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": lambda: settings.OIDC_CLIENT_SECRET,
        "OIDC_RP_SCOPES": lambda: SCOPES,
        "OIDC_USE_PKCE": lambda: True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": lambda: "S256",
        "OIDC_USE_NONCE": lambda: True,
        "OIDC_TIMEOUT": lambda: settings.OIDC_TIMEOUT,
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": lambda: settings.OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": lambda: discovery()["authorization_endpoint"],
        "OIDC_OP_TOKEN_ENDPOINT": lambda: discovery()["token_endpoint"],
        "OIDC_OP_USER_ENDPOINT": lambda: discovery().get("userinfo_endpoint"),
        "OIDC_OP_JWKS_ENDPOINT": lambda: discovery()["jwks_uri"],
        "OIDC_AUTHENTICATION_CALLBACK_URL": lambda: "oidc_authentication_callback",
        "OIDC_STORE_ACCESS_TOKEN": lambda: False,
        "OIDC_STORE_ID_TOKEN": lambda: False,
        "OIDC_EXEMPT_URLS": lambda: [],
        "LOGIN_REDIRECT_URL": lambda: settings.LOGIN_REDIRECT_URL,
    }
    if name in ours:
        return ours[name]()
    return getattr(settings, name, *default) if default else getattr(settings, name)


def _lazy(name: str) -> property:
    return property(lambda self: _setting(name))


# --- the authentication backend ----------------------------------------------------


class ProviderSignIn(OIDCAuthenticationBackend):
    """Answers only the provider's callback (a `code` and a `state`), and
    only when OIDC_ISSUER is set."""

    get_settings = staticmethod(_setting)
    OIDC_OP_TOKEN_ENDPOINT = _lazy("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = _lazy("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = _lazy("OIDC_OP_JWKS_ENDPOINT")
    OIDC_RP_CLIENT_ID = _lazy("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = _lazy("OIDC_RP_CLIENT_SECRET")
    OIDC_RP_IDP_SIGN_KEY = None

    def __init__(self, *args, **kwargs):
        # Nothing read here: the endpoints come from discovery, at sign-in.
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if not settings.OIDC_ISSUER or request is None or "code" not in request.GET:
            return None
        return super().authenticate(request, **kwargs)

    def get_token(self, payload):
        try:
            return super().get_token(payload)
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "?"
            raise SignInRefused(
                f"The identity provider refused to exchange the sign-in code (HTTP {status})."
            ) from None
        except requests.RequestException as exc:
            raise ProviderUnavailable(
                f"The identity provider's token endpoint could not be reached: {type(exc).__name__}."
            ) from None

    def verify_token(self, token, **kwargs):
        """The ID token's claims, once everything about it is checked."""
        if not isinstance(token, str) or not token:
            raise SignInRefused("The identity provider sent no ID token.")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise SignInRefused("The ID token is not a valid JWT.") from None
        alg = header.get("alg")
        if not accepted(alg):
            raise SignInRefused(
                f"The ID token is signed with {str(alg)[:20]!r}, which is not accepted "
                f"(accepted: the provider's asymmetric algorithms)."
            )
        try:
            claims = decode(token, alg, ["iss", "sub", "aud", "exp", "iat"])
        except jwt.ExpiredSignatureError:
            raise SignInRefused("The ID token has expired.") from None
        except jwt.ImmatureSignatureError:
            raise SignInRefused("The ID token is not valid yet (issued in the future).") from None
        except jwt.PyJWTError as exc:
            raise SignInRefused(refusal(exc, "ID token")) from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != settings.OIDC_CLIENT_ID:
            raise SignInRefused("The ID token names several audiences but not this client as its authorized party.")
        if "azp" in claims and claims["azp"] != settings.OIDC_CLIENT_ID:
            raise SignInRefused(
                "The ID token was issued to another client (its authorized party, azp, is not this one)."
            )
        if "nonce" in kwargs and claims.get("nonce") != kwargs["nonce"]:
            raise SignInRefused("The ID token's nonce does not match this sign-in (a replayed token).")
        if not isinstance(claims.get("sub"), str) or not claims["sub"] or len(claims["sub"]) > 255:
            raise SignInRefused("The ID token's subject is not usable.")
        return claims

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims, with the userinfo endpoint's when the
        provider has one (the groups claim may be only there)."""
        claims = dict(payload)
        if access_token and self.OIDC_OP_USER_ENDPOINT:
            try:
                info = super().get_userinfo(access_token, id_token, payload)
            except (requests.RequestException, ValueError):
                raise ProviderUnavailable("The identity provider's userinfo endpoint did not answer.") from None
            if not isinstance(info, dict) or info.get("sub") != payload["sub"]:
                raise SignInRefused("The provider's userinfo is about another subject than the ID token.")
            claims.update({name: value for name, value in info.items() if name not in ("iss", "aud", "sub")})
        return claims

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        user = provider_identity.sign_in(issuer=payload["iss"], subject=payload["sub"], claims=claims)
        auth_time = payload.get("auth_time")
        sid = payload.get("sid")
        user.provider_sign_in = {
            "iss": payload["iss"],
            "sub": payload["sub"],
            "sid": sid if isinstance(sid, str) else None,
            "groups": provider_identity.provider_groups(claims)[:50],
            "auth_time": int(auth_time) if isinstance(auth_time, (int, float)) else None,
        }
        return user


# --- views ------------------------------------------------------------------------


def _problem(request: HttpRequest, title: str, message: str, status: int) -> HttpResponse:
    return render(request, "workflows/sign_in_problem.html", {"title": title, "message": message}, status=status)


def _unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    log.warning("identity provider unavailable: %s", exc)
    return _problem(
        request,
        "The identity provider cannot be reached",
        f"{exc} Try again in a moment; if it persists, tell an administrator.",
        503,
    )


class SignInStart(oidc_views.OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off to the provider. `reauth=1` asks it to make
    the person sign in again (a decision needs a recent sign-in)."""

    get_settings = staticmethod(_setting)
    OIDC_OP_AUTH_ENDPOINT = _lazy("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_RP_CLIENT_ID = _lazy("OIDC_RP_CLIENT_ID")

    def __init__(self, **kwargs):
        super(oidc_views.OIDCAuthenticationRequestView, self).__init__(**kwargs)

    def get(self, request):
        if not settings.OIDC_ISSUER:
            raise Http404("Sign-in with an identity provider is not configured.")
        try:
            return super().get(request)
        except ProviderUnavailable as exc:
            return _unavailable(request, exc)

    def get_extra_params(self, request):
        return {"prompt": "login", "max_age": "0"} if request.GET.get("reauth") else {}


class SignInCallback(oidc_views.OIDCAuthenticationCallbackView):
    """/oidc/callback/: the provider sends the person back here."""

    get_settings = staticmethod(_setting)

    def get(self, request):
        if not settings.OIDC_ISSUER:
            raise Http404("Sign-in with an identity provider is not configured.")
        states = request.session.get("oidc_states")
        if not isinstance(states, dict) or request.GET.get("state") not in states:
            # Not the answer to a sign-in started here (a link from another
            # site, say): it changes nothing, and signs nobody out.
            return _problem(
                request,
                "Sign-in refused",
                "This sign-in answer does not belong to a sign-in started here, or was already used "
                "(unknown state). Start again from the login page.",
                400,
            )
        if request.GET.get("error"):
            error = request.GET.get("error", "")[:100]
            silent = request.GET["state"] in request.session.get(SILENT_STATES, [])
            user = request.user if request.user.is_authenticated else None
            super().get(request)  # forgets the state and ends this session
            if user is not None:
                if silent and error not in PROVIDER_TROUBLE:
                    sessions.refused_at_renewal(user, error=error)
                return _problem(
                    request,
                    "Your sign-in has ended",
                    "The identity provider ended your session. Sign in again to go on.",
                    401,
                )
            description = request.GET.get("error_description", "")[:300]
            return _problem(
                request,
                "Sign-in refused",
                f"The identity provider refused the sign-in: {error}{': ' + description if description else ''}.",
                403,
            )
        if "code" not in request.GET:
            return _problem(request, "Sign-in refused", "The identity provider's answer has no code.", 400)
        # A silent renewal proves nothing about when the person last signed in.
        self.silent = request.GET["state"] in request.session.get(SILENT_STATES, [])
        try:
            response = super().get(request)
        except SignInRefused as exc:
            log.warning("sign-in refused: %s", exc)
            auth.logout(request)
            return _problem(request, "Sign-in refused", str(exc), 403)
        except ProviderUnavailable as exc:
            auth.logout(request)
            return _unavailable(request, exc)
        if not request.user.is_authenticated:
            return _problem(
                request,
                "Sign-in refused",
                "The identity provider's answer did not sign you in (the account may be deactivated).",
                403,
            )
        return response

    @property
    def success_url(self):
        return local_path(self.request.session.get("oidc_login_next")) or reverse(settings.LOGIN_REDIRECT_URL)

    def login_success(self):
        response = super().login_success()
        sign_in = getattr(self.user, "provider_sign_in", {})
        session = self.request.session
        session[SSO_SESSION_KEY] = {name: sign_in.get(name) for name in ("iss", "sub", "sid", "groups")}
        now = int(time.time())
        # When the person last proved who they are at the provider: its
        # `auth_time`; without one, now, unless this was a silent renewal
        # (which proves nothing new). Decisions need it recent.
        if sign_in.get("auth_time"):
            session[SIGNED_IN_AT] = min(now, sign_in["auth_time"])
        elif not getattr(self, "silent", False) or SIGNED_IN_AT not in session:
            session[SIGNED_IN_AT] = now
        return response


class SessionRefresh(oidc_middleware.SessionRefresh):
    """Renews an SSO session's ID token at the provider (prompt=none) once it
    is due, at the next request of any method; the provider answering
    `login_required` (or any error) ends the session. Does nothing for local
    sessions, the API, or without OIDC_ISSUER."""

    get_settings = staticmethod(_setting)
    OIDC_OP_AUTHORIZATION_ENDPOINT = _lazy("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_RP_CLIENT_ID = _lazy("OIDC_RP_CLIENT_ID")
    OIDC_EXEMPT_URLS: list = []
    OIDC_STATE_SIZE = 32
    OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
    OIDC_RP_SCOPES = SCOPES
    OIDC_USE_NONCE = True
    OIDC_NONCE_SIZE = 32
    EXEMPT_PREFIXES = ("/api/", "/oidc/", "/static/", "/logout/", "/healthz", "/metrics", "/.well-known/")

    def __init__(self, get_response):
        super(oidc_middleware.SessionRefresh, self).__init__(get_response)

    def is_refreshable_url(self, request):
        return (
            bool(settings.OIDC_ISSUER)
            and SSO_SESSION_KEY in request.session
            and request.user.is_authenticated
            and not request.path.startswith(self.EXEMPT_PREFIXES)
        )

    def process_request(self, request):
        try:
            response = super().process_request(request)
        except ProviderUnavailable as exc:
            return _unavailable(request, exc)
        if response is None:
            return None
        state = parse_qs(urlsplit(response["Location"]).query).get("state", [""])[0]
        request.session[SILENT_STATES] = [*request.session.get(SILENT_STATES, [])[-9:], state]
        htmx = request.headers.get("HX-Request") == "true"  # before django-htmx's middleware
        if request.method != "GET" or htmx:
            # A form or a partial cannot be carried through the provider: back to the page it came from.
            request.session["oidc_login_next"] = _page_of(request)
        if htmx:
            renew = HttpResponse(status=204)
            renew["HX-Redirect"] = response["Location"]
            return renew
        return response


def _page_of(request: HttpRequest) -> str:
    """The same-site page a form or partial request came from, else the inbox."""
    for header in ("HX-Current-URL", "Referer"):
        url = request.headers.get(header, "")
        if url and url_has_allowed_host_and_scheme(
            url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            parts = urlsplit(url)
            return parts.path + (f"?{parts.query}" if parts.query else "")
    return reverse(settings.LOGIN_REDIRECT_URL)


# --- pages ------------------------------------------------------------------------


def sign_in_url(next_url: str = "", reauth: bool = False) -> str:
    query = {key: value for key, value in (("next", next_url), ("reauth", "1" if reauth else "")) if value}
    return reverse("oidc_authentication_init") + (f"?{urlencode(query)}" if query else "")


def sign_in_context(request: HttpRequest) -> dict:
    """For every page: an SSO user whose provider groups map to no role here,
    or to a role but no team, is told so (they are signed in, and see nothing)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not hasattr(request, "session"):
        return {}
    sso = request.session.get(SSO_SESSION_KEY)
    if not isinstance(sso, dict) or user.is_superuser:
        return {}
    about = {"issuer": sso.get("iss") or "", "groups": sso.get("groups") or [], "claim": settings.OIDC_GROUPS_CLAIM}
    if not user.groups.exists():
        return {"unmapped_sign_in": about}
    if teams.is_staff_role(user) and not teams.is_global(user) and not teams.team_ids(user):
        return {"teamless_sign_in": about}
    return {}
