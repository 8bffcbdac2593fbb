"""The approval proof (docs/explanation/approval-proofs.md#approval-proof): a compact JWS the console's worker sends
in the `Approval-Proof` header of every remote write, and the check a
receiving system makes of it.

A receiver needs this module and joserfc, nothing of Django:

    from durableconsole import proof

    claims = proof.verify(request.headers["Approval-Proof"], method=request.method, url=full_url,
                          body=raw_body, idempotency_key=request.headers.get("Idempotency-Key"),
                          jwks=proof.load_jwks("https://console.example.com/.well-known/jwks.json"),
                          audience="https://desk.example.com")

`verify` returns the claims or raises `InvalidProof` (its message says
which check failed; it is safe to send back to the caller). It accepts
only `alg: EdDSA` over an Ed25519 key named by `kid` in the given key set,
`typ: approval-proof+jwt`, no key-carrying headers (`jku`, `jwk`, `x5u`,
`x5c`), and a token whose `exp`, `iat` and `aud` hold and whose `htm`,
`htu`, `body_sha256` and `op` are the request's own method, URL, body and
Idempotency-Key.

A message sent by `email.send` carries the same proof in its
`Approval-Proof` header (folded into lines: `verify` ignores whitespace in a
token) and its operation key in `Idempotency-Key`; its `htm` is `SMTP`, its
`htu` and `aud` are `mail_url` of the recipients (To and Cc), and its
`body_sha256` covers the text body as `mail_body` puts it (CRLF line
endings, as SMTP carries it):

    recipients = [a for _, a in getaddresses(message.get_all("To", []) + message.get_all("Cc", []))]
    target = proof.mail_url(recipients)
    claims = proof.verify(message["Approval-Proof"], method="SMTP", url=target,
                          body=message.get_body(("plain",)).get_content(),
                          idempotency_key=message["Idempotency-Key"], jwks=jwks, audience=target)

The console signs with `sign` (the worker's side: `workflows.actions.context`).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from joserfc import jws
from joserfc.errors import ExpiredTokenError, JoseError, MissingClaimError
from joserfc.jwk import KeySet, OKPKey
from joserfc.jws import JWSRegistry
from joserfc.jwt import JWTClaimsRegistry

HEADER = "Approval-Proof"
ALG = "EdDSA"
TYP = "approval-proof+jwt"
DEFAULT_TTL_SECONDS = 300
SMTP = "SMTP"
# Header lines stay short: a long token is folded at this width.
FOLD_WIDTH = 76
# Headers that would let a token name its own key or where to fetch one: a
# receiver trusts only the key set it was given.
KEY_CARRYING_HEADERS = ("jku", "jwk", "x5u", "x5c")
CLAIMS = (
    "iss",
    "aud",
    "jti",
    "iat",
    "exp",
    "wf",
    "rev",
    "plan_hash",
    "step",
    "action",
    "op",
    "htm",
    "htu",
    "body_sha256",
    "args_sha256",
    "approvers",
    "policy_version",
)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class InvalidProof(Exception):
    """The request carries no valid approval proof; the message says why."""


class UnknownKey(InvalidProof):
    """The proof names a key id the receiver's key set does not hold: fetch
    the set again (the console may have rotated its key) before refusing."""


# --- the algorithm ---------------------------------------------------------


class _Ed25519(jws.JWSAlgModel):
    """`EdDSA` as the approval proof names it (docs/explanation/approval-proofs.md#keys), held to Ed25519 keys.
    joserfc's own `EdDSA` also takes Ed448 and warns that RFC 9864 deprecates the name
    in favour of `Ed25519`; the header keeps the name receivers expect,
    and the curve is fixed here instead."""

    name = ALG
    description = "EdDSA over Ed25519 only"
    key_type = "OKP"
    recommended = True

    def sign(self, msg: bytes, key: OKPKey) -> bytes:
        private = key.get_op_key("sign")
        if not isinstance(private, Ed25519PrivateKey):
            raise InvalidProof("the signing key is not an Ed25519 key")
        return private.sign(msg)

    def verify(self, msg: bytes, sig: bytes, key: OKPKey) -> bool:
        public = key.get_op_key("verify")
        if not isinstance(public, Ed25519PublicKey):
            return False
        try:
            public.verify(sig, msg)
        except Exception:
            return False
        return True


_ALGORITHM = _Ed25519()


class _Registry(JWSRegistry):
    """Knows one algorithm: no `none`, no HMAC, no RSA, whatever the header says."""

    def get_alg(self, name: str) -> jws.JWSAlgModel:
        if name != ALG:
            raise InvalidProof(f"alg {name!r} is refused: only {ALG} (Ed25519)")
        return _ALGORITHM


_REGISTRY = _Registry()


# --- helpers shared by both sides ------------------------------------------


def body_sha256(body: bytes | str | None) -> str:
    """SHA-256 hex of the exact body bytes (of the empty string when none)."""
    if body is None:
        return EMPTY_SHA256
    if isinstance(body, str):
        body = body.encode("utf-8")
    return hashlib.sha256(body).hexdigest()


def origin(url: str) -> str:
    """`scheme://host[:port]` of a URL, as `aud` names a receiver: lower
    case, the default port left out."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def mail_url(recipients: Iterable[str]) -> str:
    """`htu` and `aud` of a message's proof: `mailto:` and its recipients,
    each once, sorted and joined by commas; a domain in lower case and in
    its ASCII (xn--) form, as mail headers carry it."""
    return "mailto:" + ",".join(sorted({_mail_address(address) for address in recipients}))


def _mail_address(address: str) -> str:
    local, _, domain = address.strip().rpartition("@")
    try:
        domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        pass
    return f"{local}@{domain.lower()}"


def mail_body(text: str | bytes) -> str:
    """A text body as SMTP carries it, which is what its proof covers: each
    line ended by CRLF (a bare CR or LF becomes CRLF; a last line gets one)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidProof("the message body is not UTF-8") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return "".join(f"{line}\r\n" for line in lines)


def folded(token: str) -> str:
    """The token as a mail header carries it: in pieces that fold into
    short lines (a header line may not pass 998 characters)."""
    return " ".join(token[start : start + FOLD_WIDTH] for start in range(0, len(token), FOLD_WIDTH))


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def sign(claims: Mapping[str, Any], *, key: OKPKey, kid: str) -> str:
    """A compact JWS of `claims` under the Ed25519 `key`, named `kid`."""
    header = {"alg": ALG, "typ": TYP, "kid": kid}
    payload = json.dumps(claims, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    return jws.serialize_compact(header, payload, key, registry=_REGISTRY)


# --- the receiver's side ----------------------------------------------------


def load_jwks(source: str | Path, *, timeout: float = 10.0) -> dict:
    """A key set from a file, or from an https URL (http only to a loopback
    host, where nothing on the network can alter it in transit)."""
    text = str(source)
    if text.startswith(("http://", "https://")):
        parts = urlsplit(text)
        if parts.scheme == "http" and not _loopback(parts.hostname or ""):
            raise ValueError(
                f"refusing to fetch a key set over plain http from {parts.hostname}: use https "
                "(http only to a loopback host)"
            )
        # The URL is the receiver's own configuration, not a caller's.
        with urllib.request.urlopen(text, timeout=timeout) as response:  # noqa: S310
            data = json.loads(response.read(1024 * 1024))
    else:
        data = json.loads(Path(text).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError(f'{text} is not a JWK set ({{"keys": [...]}})')
    return data


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _key_for(kid: str, jwks: Mapping | KeySet) -> OKPKey:
    entries = [key.as_dict() for key in jwks.keys] if isinstance(jwks, KeySet) else jwks.get("keys", [])
    entry = next((e for e in entries if isinstance(e, dict) and e.get("kid") == kid), None)
    if entry is None:
        raise UnknownKey(f"unknown kid {kid!r}: not in the receiver's key set")
    if (
        entry.get("kty") != "OKP"
        or entry.get("crv") != "Ed25519"
        or entry.get("alg", ALG) != ALG
        or entry.get("use", "sig") != "sig"
    ):
        raise InvalidProof(f"key {kid!r} is not an Ed25519 signing key")
    try:
        return OKPKey.import_key({name: entry[name] for name in ("kty", "crv", "x")})
    except (JoseError, KeyError, TypeError, ValueError):
        raise InvalidProof(f"key {kid!r} of the receiver's key set is unreadable") from None


def header_of(token: str) -> dict:
    """The token's protected header, unverified (to read its `kid`)."""
    if not isinstance(token, str) or token.count(".") != 2:
        raise InvalidProof("not a compact JWS (three dot-separated parts)")
    try:
        header = json.loads(_b64decode(token.split(".", 1)[0]))
    except (ValueError, UnicodeDecodeError):
        raise InvalidProof("the header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise InvalidProof("the header is not a JSON object")
    return header


def verify(
    token: str | None,
    *,
    method: str,
    url: str,
    body: bytes | str | None,
    idempotency_key: str | None,
    jwks: Mapping | KeySet,
    audience: str,
    leeway: int = 30,
) -> dict:
    """The proof's claims, if `token` proves that the console approved this
    exact request; else `InvalidProof`. `url` is the full URL as received
    (scheme, host, path and query), `body` the raw bytes, `jwks` the
    console's key set (`load_jwks`), `audience` this receiver's origin.
    For a message: `method` "SMTP", `url` and `audience` its `mail_url`,
    `body` its text body (read as `mail_body` puts it)."""
    if isinstance(token, str):
        token = "".join(token.split())  # a folded header's whitespace
    if not token:
        raise InvalidProof(f"no {HEADER} header")
    if not idempotency_key:
        raise InvalidProof("no Idempotency-Key: a proof binds the operation key it was issued for")
    header = header_of(token)
    if header.get("alg") != ALG:
        raise InvalidProof(f"alg {header.get('alg')!r} is refused: only {ALG} (Ed25519)")
    if header.get("typ") != TYP:
        raise InvalidProof(f"typ must be {TYP!r}")
    if carried := [name for name in KEY_CARRYING_HEADERS if name in header]:
        raise InvalidProof(f"header {', '.join(carried)} refused: the key comes from the receiver's key set only")
    if "crit" in header:
        raise InvalidProof("crit headers are not understood")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise InvalidProof("no kid in the header")
    key = _key_for(kid, jwks)
    try:
        signed = jws.deserialize_compact(token, key, registry=_REGISTRY)
    except InvalidProof:
        raise
    except JoseError as exc:
        raise InvalidProof(f"signature does not verify ({exc.error})") from None
    except (ValueError, TypeError):
        raise InvalidProof("malformed token") from None
    try:
        claims = json.loads(signed.payload)
    except (ValueError, UnicodeDecodeError):
        raise InvalidProof("the payload is not JSON") from None
    if not isinstance(claims, dict):
        raise InvalidProof("the payload is not a JSON object")
    expected = {
        "htm": method.upper(),
        "htu": url,
        "body_sha256": body_sha256(mail_body(body or "") if method.upper() == SMTP else body),
        "op": idempotency_key,
    }
    checks = JWTClaimsRegistry(
        now=int(time.time()),
        leeway=leeway,
        aud={"essential": True, "value": audience},
        exp={"essential": True},
        iat={"essential": True},
        jti={"essential": True},
        wf={"essential": True},
        approvers={"essential": True, "allow_blank": True},
        **{name: {"essential": True, "value": value} for name, value in expected.items()},
    )
    try:
        checks.validate(claims)
    except ExpiredTokenError:
        raise InvalidProof("the proof has expired") from None
    except MissingClaimError as exc:
        raise InvalidProof(f"claims missing: {exc.claim}") from None
    except JoseError as exc:
        claim = getattr(exc, "claim", "")
        what = {"htm": "method", "htu": "URL", "body_sha256": "body", "op": "Idempotency-Key", "aud": "audience"}.get(
            claim
        )
        raise InvalidProof(
            f"{claim}: the proof was not issued for this {what}"
            if what
            else f"claim {claim or '?'} is invalid ({exc.description})"
        ) from None
    if not isinstance(claims.get("approvers"), list):
        raise InvalidProof("approvers must be a list")
    return claims
