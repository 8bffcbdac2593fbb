"""What perform() knows of the approval behind it, and the approval proof
it carries to the receiver (docs/explanation/approval-proofs.md#approval-proof).

The engine sets a `PerformContext` around each perform() (a context
variable of the effect's thread), so the HTTP helpers (`transport.call`)
find it and attach a fresh `Approval-Proof` to every write they send,
signed over the exact request: method, full URL, SHA-256 of the body bytes
and the Idempotency-Key. An action that calls no HTTP API gets the same
context from `perform_context()` and passes `context.proof(...)` on in its
own way (docs/guides/action-authors.md#the-public-interface). Reads (GET,
HEAD, OPTIONS) carry none: only writes change anything.

Signing is one Ed25519 signature per write, made on the effect thread with
the key the engine picked when it wrote the REQUESTED attempt (the attempt
records that key id and the proof's unique id).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import requests
from django.conf import settings
from joserfc.jwk import OKPKey

from durableconsole import proof
from workflows.actions.base import ActionError
from workflows.audit import signing
from workflows.states import FailureClass

HEADER = proof.HEADER
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_current: ContextVar[PerformContext | None] = ContextVar("perform_context", default=None)
_okp_keys: dict[str, OKPKey] = {}


def new_jti() -> str:
    return uuid.uuid4().hex


@dataclass
class PerformContext:
    """The approved effect being performed: which workflow, revision, plan
    and step, who approved it, under which policy, and with which key its
    proofs are signed. `jti` is the unique id of the first proof issued;
    later ones (an action that sends several writes) add `.2`, `.3`."""

    workflow_id: str
    revision: int
    plan_hash: str
    step: str
    action: str
    operation_key: str
    approvers: list[dict[str, Any]]
    policy_version: int | None
    args_sha256: str
    # The key id and unique id the REQUESTED attempt recorded ("" for an
    # in-process action's: the current key and a new id are taken then).
    kid: str = ""
    jti: str = field(default_factory=new_jti)
    # The key set as the engine read it for this batch of effects (read
    # again here when not given).
    keys: signing.KeySet | None = field(default=None, repr=False)
    _issued: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)
    # SHA-256 of what the typed gates before the step decided (docs/explanation/review.md#typed-decisions);
    # None when there were none, and then the claim is left out.
    decisions_sha256: str | None = None

    def signing_key(self) -> signing.SigningKey:
        """The key the attempt recorded; the current one if that key was
        retired since (its private half is gone at once)."""
        keys = self.keys or signing.keyset()
        key = keys.by_id(self.kid) if self.kid else None
        return key if key is not None and key.private is not None else keys.current

    def claims(self, method: str, url: str, body: bytes | str | None, *, jti: str) -> dict[str, Any]:
        now = int(time.time())
        # A message's audience is its recipients, and it may be read a day later.
        mail = method.upper() == proof.SMTP
        return {
            "iss": settings.CONSOLE_URL,
            "aud": url if mail else proof.origin(url),
            "jti": jti,
            "iat": now,
            "exp": now + (settings.APPROVAL_PROOF_MAIL_TTL_SECONDS if mail else settings.APPROVAL_PROOF_TTL_SECONDS),
            "wf": self.workflow_id,
            "rev": self.revision,
            "plan_hash": self.plan_hash,
            "step": self.step,
            "action": self.action,
            "op": self.operation_key,
            "htm": method.upper(),
            "htu": url,
            "body_sha256": proof.body_sha256(body),
            "args_sha256": self.args_sha256,
            "approvers": self.approvers,
            "policy_version": self.policy_version,
            **({"decisions_sha256": self.decisions_sha256} if self.decisions_sha256 else {}),
        }

    def proof(self, method: str, url: str, body: bytes | str | None = b"") -> str:
        """A fresh `Approval-Proof` for one request: `url` in full, as sent,
        `body` the exact bytes sent. Each call has its own `jti`."""
        number = next(self._issued)
        jti = self.jti if number == 1 else f"{self.jti}.{number}"
        key = self.signing_key()
        return proof.sign(self.claims(method, url, body, jti=jti), key=_okp(key), kid=key.kid)


def mail_headers(operation_key: str, recipients: list[str], body: str) -> dict[str, str]:
    """The headers that bind a message to its approval (docs/explanation/decisions.md#bound-decisions): the
    operation key, and, when sent while performing an effect, a proof over
    the recipients and `body`, the text exactly as sent (`proof.mail_body`)."""
    headers = {"Idempotency-Key": operation_key}
    context = _current.get()
    if context is not None:
        headers[HEADER] = proof.folded(context.proof(proof.SMTP, proof.mail_url(recipients), body))
    return headers


def _okp(key: signing.SigningKey) -> OKPKey:
    """The signing key (one with its private half) as joserfc holds it,
    made once per key id."""
    okp = _okp_keys.get(key.kid)
    if okp is None:
        okp = _okp_keys[key.kid] = OKPKey.import_key(
            {"kty": "OKP", "crv": "Ed25519", "x": key.jwk()["x"], "d": signing.b64(signing.raw_private(key.private))}
        )
    return okp


def perform_context() -> PerformContext | None:
    """The context of the effect this thread is performing, or None
    (a preview, a lookup, or no engine around)."""
    return _current.get()


@contextmanager
def performing(context: PerformContext | None):
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


class ProofAuth(requests.auth.AuthBase):
    """requests' hook after the body is prepared: the proof covers the
    method, URL and body bytes exactly as they go out."""

    def __init__(self, context: PerformContext):
        self.context = context

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body
        if isinstance(body, str):
            body = request.body = body.encode("utf-8")
            request.prepare_content_length(body)
        elif body is not None and not isinstance(body, bytes):
            raise ActionError(
                FailureClass.INVALID_ARGUMENTS, "a streamed body cannot carry an approval proof: send bytes"
            )
        request.headers[HEADER] = self.context.proof(request.method, request.url, body)
        return request


def proof_auth(method: str) -> ProofAuth | None:
    """The hook for a request of `method` made now: writes made inside a
    perform context carry a proof; reads and calls outside one do not."""
    context = _current.get()
    if context is None or method.upper() in SAFE_METHODS:
        return None
    return ProofAuth(context)
