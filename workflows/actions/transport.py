"""HTTP plumbing for actions that call other systems: one session per
thread, the operation key as `Idempotency-Key`, the approval proof on every
write made while performing an effect (`context`), and every failure
classified (sent or not, retryable or not)."""

from __future__ import annotations

import math
import threading
from urllib.parse import urlsplit

import requests
from django.conf import settings

from workflows.actions.base import ActionError
from workflows.actions.context import proof_auth
from workflows.audit.redaction import redact_text
from workflows.states import FailureClass
from workflows.webhooks import outbound

_local = threading.local()


def http_session() -> requests.Session:
    """This thread's session. It reads the environment once, not on every
    request as requests does by default (a scan of the whole environment per
    call, a fifth of a call's CPU): proxies per host as HTTP(S)_PROXY and
    NO_PROXY say, the CA bundle of REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE.
    It never sends ~/.netrc credentials: a plan names its URLs, and the
    worker's own logins must not travel to them."""
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = outbound.new_session()
        _local.proxies = {}
    return session


def _proxies_for(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    origin = (parts.scheme, parts.netloc)
    proxies = _local.proxies.get(origin)
    if proxies is None:
        proxies = _local.proxies[origin] = requests.utils.get_environ_proxies(url)
    return proxies


def _retry_after(response: requests.Response) -> float | None:
    """The server's wait in seconds, read defensively: it may send `inf`,
    `nan`, `-5` or 10**12. A wait is never negative and at most a year: past
    any plan's deadline, so such a wait ends the retries (`retry` never
    schedules one past the deadline), where an unbounded one would overflow
    the datetime of the next attempt. `nan` and unreadable values count as
    no header."""
    longest = 366 * 24 * 3600.0
    raw = response.headers.get("Retry-After")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        from email.utils import parsedate_to_datetime

        from django.utils import timezone

        try:
            seconds = (parsedate_to_datetime(raw) - timezone.now()).total_seconds()
        except (TypeError, ValueError, OverflowError):
            return None
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), longest)


# The error code a receiver answers (docs/explanation/approval-proofs.md#approval-proof) when a write carries no
# valid approval proof: a refusal, never retried; a replay once the cause
# is fixed sends a fresh proof under the same operation key.
PROOF_REFUSED = "approval_proof_invalid"


def _error_code(response: requests.Response) -> str | None:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def classify_response(response: requests.Response) -> ActionError:
    status = response.status_code
    body = redact_text(response.text[:300])
    message = f"HTTP {status} from {response.request.method} {response.request.path_url.split('?')[0]}: {body}"
    if status == 429:
        return ActionError(FailureClass.RATE_LIMITED, message, retry_after=_retry_after(response))
    if status in (500, 502, 503, 504):
        return ActionError(FailureClass.TRANSIENT, message, retry_after=_retry_after(response))
    if status in (400, 404, 422):
        return ActionError(FailureClass.INVALID_ARGUMENTS, message)
    if status in (401, 403):
        if _error_code(response) == PROOF_REFUSED:
            message = (
                f"HTTP {status} from {response.request.method} {response.request.path_url.split('?')[0]}: "
                f"the receiver refused the approval proof: {body}"
            )
        return ActionError(FailureClass.PERMISSION_DENIED, message)
    if status == 409:
        return ActionError(FailureClass.CONFLICT, message)
    return ActionError(FailureClass.UNKNOWN, message)


def classify_exception(exc: requests.RequestException) -> ActionError:
    """Before the request was sent, nothing happened; after, anything may have."""
    text = redact_text(f"{type(exc).__name__}: {exc}")[:500]
    if isinstance(exc, requests.ConnectTimeout):
        return ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, text)
    if isinstance(exc, requests.ReadTimeout):
        return ActionError(FailureClass.TIMEOUT, text, outcome_unknown=True)
    if isinstance(exc, requests.ConnectionError):
        if "refused" in str(exc).lower() or "Failed to establish" in str(exc):
            return ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, text)
        return ActionError(FailureClass.TRANSIENT, text, outcome_unknown=True)
    return ActionError(FailureClass.UNKNOWN, text, outcome_unknown=True)


def call(
    method: str, url: str, *, operation_key: str | None = None, checked: bool = False, **kwargs
) -> requests.Response:
    """`checked`: the URL comes from a plan, so the outbound address rules
    apply (`workflows.webhooks.outbound`): a refused address is never
    called, and a redirect is an answer, not followed. A write made while
    performing an effect carries its approval proof, signed over the
    request as prepared (`context.ProofAuth`)."""
    headers = kwargs.pop("headers", {})
    if operation_key:
        headers["Idempotency-Key"] = operation_key
    if (auth := proof_auth(method)) is not None:
        kwargs["auth"] = auth
    timeout = (min(2.0, settings.ACTION_TIMEOUT_SECONDS), settings.ACTION_TIMEOUT_SECONDS)
    try:
        if checked:
            response = outbound.send(method, url, headers=headers, timeout=timeout, **kwargs)
        else:
            session = http_session()
            response = session.request(
                method, url, headers=headers, timeout=timeout, proxies=_proxies_for(url), **kwargs
            )
    except outbound.AddressRefused as exc:
        raise ActionError(FailureClass.POLICY_FAILED, f"{url.split('?')[0]}: {exc}") from None
    except outbound.Unresolvable as exc:
        raise ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, redact_text(str(exc))[:500]) from None
    except requests.RequestException as exc:
        raise classify_exception(exc) from None
    if response.status_code >= (300 if checked else 400):
        raise classify_response(response)
    return response
