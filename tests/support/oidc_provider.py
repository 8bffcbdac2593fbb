"""A small OpenID Connect provider that can issue bad tokens, run as a real
HTTP process for the sign-in tests (docs/explanation/teams.md#teams). Tokens are made with
joserfc; the good path is also tested against oidc-provider-mock.

    provider = BadTokenProvider().start()
    provider.control(mode="wrong_audience", sub="mallory", groups=["idp-reviewers"])
    ...
    provider.requests()   # what the console sent to /authorize and /token
    provider.stop()

Endpoints: discovery, /authorize (no page: it answers at once for the
configured person, or `login_required` to a `prompt=none` request in mode
`login_required`), /token (checks the PKCE verifier against the challenge),
/jwks, /userinfo, /logout (the end_session_endpoint: logs the request),
/control (the test's remote control) and /logout-token (signs a back-channel
logout token for the test to send: the standard claims, with the test's
changes; `"sign": "other"` signs with a key not in the JWKS).

The person's ID token carries `sid` (the provider session: `control(sid=...)`)
and, with `control(email=..., email_verified=True)`, those claims.

Modes: `good`, `wrong_audience`, `bad_signature` (signed by a key that is
not in the JWKS, under the published key's kid), `expired`, `wrong_nonce`,
`login_required`, `alg_none` (unsigned), `hs256` (signed with the client
secret), `wrong_issuer`, `wrong_azp` (this client among two audiences, the
other one authorized), `foreign_azp` (this client the one audience, another
authorized), `discovery_issuer` (the discovery document, and the tokens,
name another issuer than the one the console was given). In `alg_none` and
`hs256` the discovery document offers those algorithms too, so only the
console's own list of algorithms stands in the way.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import requests

CLIENT_ID = "durable-console"
CLIENT_SECRET = "test-provider-client-secret-for-hs256"
MODES = {
    "good",
    "wrong_audience",
    "bad_signature",
    "expired",
    "wrong_nonce",
    "login_required",
    "alg_none",
    "hs256",
    "wrong_issuer",
    "wrong_azp",
    "foreign_azp",
    "discovery_issuer",
}
# What the provider says it is in mode `discovery_issuer`.
OTHER_ISSUER_PATH = "/another-issuer"


class _State:
    def __init__(self, port: int):
        from joserfc.jwk import RSAKey

        self.issuer = f"http://127.0.0.1:{port}"
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.other_key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.mode = "good"
        self.sub = "alice"
        self.groups: list[str] = []
        self.auth_time = True  # send the auth_time claim
        self.sid = "provider-session-1"
        self.email: str | None = None  # default: <sub>@example.com, unverified
        self.email_verified: bool | None = None
        self.codes: dict[str, dict] = {}
        self.tokens: dict[str, dict] = {}
        self.log: list[dict] = []

    def named_issuer(self) -> str:
        return self.issuer + (OTHER_ISSUER_PATH if self.mode == "discovery_issuer" else "")


def _challenge(verifier: str) -> str:
    return _b64(hashlib.sha256(verifier.encode()).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hand_made(header: dict, claims: dict, secret: bytes | None) -> str:
    """A JWT put together by hand: joserfc refuses to make these."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest() if secret else b""
    return f"{signing_input}.{_b64(signature)}"


def _handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _json(self, body, status=200):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _redirect(self, url):
            self.send_response(302)
            self.send_header("Location", url)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _form(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            return {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}

        def do_GET(self):
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                offered = ["RS256", "HS256", "none"] if state.mode in ("alg_none", "hs256") else ["RS256"]
                return self._json(
                    {
                        "issuer": state.named_issuer(),
                        "authorization_endpoint": f"{state.issuer}/authorize",
                        "token_endpoint": f"{state.issuer}/token",
                        "userinfo_endpoint": f"{state.issuer}/userinfo",
                        "jwks_uri": f"{state.issuer}/jwks",
                        "response_types_supported": ["code"],
                        "subject_types_supported": ["public"],
                        "id_token_signing_alg_values_supported": offered,
                        "code_challenge_methods_supported": ["S256"],
                        "end_session_endpoint": f"{state.issuer}/logout",
                        "backchannel_logout_supported": True,
                    }
                )
            if url.path == "/jwks":
                return self._json({"keys": [state.key.as_dict(private=False)]})
            if url.path == "/requests":
                return self._json(state.log)
            if url.path == "/userinfo":
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if token not in state.tokens:
                    return self._json({"error": "invalid_token"}, 401)
                return self._json(state.tokens[token])
            if url.path == "/logout":
                state.log.append({"endpoint": "logout", **query})
                return self._json({"signed_out": True})
            if url.path == "/authorize":
                state.log.append({"endpoint": "authorize", **query})
                back = query.get("redirect_uri", "")
                if query.get("prompt") == "none" and state.mode == "login_required":
                    return self._redirect(
                        f"{back}?{urlencode({'error': 'login_required', 'state': query.get('state', '')})}"
                    )
                code = secrets.token_urlsafe(16)
                state.codes[code] = {**query, "sub": state.sub, "groups": list(state.groups)}
                return self._redirect(f"{back}?{urlencode({'code': code, 'state': query.get('state', '')})}")
            self._json({"error": "not_found"}, 404)

        def do_POST(self):
            url = urlsplit(self.path)
            form = self._form()
            if url.path == "/control":
                changes = json.loads(form.get("json") or "{}")
                if "mode" in changes:
                    assert changes["mode"] in MODES, changes["mode"]
                    state.mode = changes["mode"]
                state.sub = changes.get("sub", state.sub)
                state.groups = changes.get("groups", state.groups)
                state.auth_time = changes.get("auth_time", state.auth_time)
                for name in ("sid", "email", "email_verified"):
                    setattr(state, name, changes.get(name, getattr(state, name)))
                if changes.get("clear_log"):
                    state.log.clear()
                return self._json({"mode": state.mode})
            if url.path == "/logout-token":
                from joserfc import jwt

                changes = json.loads(form.get("json") or "{}")
                key = state.other_key if changes.pop("sign", "") == "other" else state.key
                header = {"alg": "RS256", "kid": "test-key", "typ": "logout+jwt", **changes.pop("header", {})}
                now = int(time.time())
                claims = {
                    "iss": state.issuer,
                    "aud": CLIENT_ID,
                    "iat": now,
                    "exp": now + 120,
                    "jti": secrets.token_urlsafe(8),
                    "events": {"http://schemas.openid.net/event/backchannel-logout": {}},
                }
                claims.update(changes)
                claims = {name: value for name, value in claims.items() if value is not None}
                return self._json({"logout_token": jwt.encode(header, claims, key)})
            if url.path == "/token":
                state.log.append(
                    {
                        "endpoint": "token",
                        **{k: v for k, v in form.items() if k != "client_secret"},
                        "client_secret_sent": form.get("client_secret") == CLIENT_SECRET,
                    }
                )
                grant = state.codes.pop(form.get("code", ""), None)
                if grant is None or form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
                    return self._json({"error": "invalid_grant"}, 400)
                if grant.get("code_challenge_method") != "S256" or _challenge(
                    form.get("code_verifier", "")
                ) != grant.get("code_challenge"):
                    return self._json({"error": "invalid_grant", "error_description": "PKCE verifier"}, 400)
                return self._json(self._tokens(grant))
            self._json({"error": "not_found"}, 404)

        def _tokens(self, grant: dict) -> dict:
            from joserfc import jwt

            now = int(time.time())
            claims = {
                "iss": state.named_issuer(),
                "sub": grant["sub"],
                "aud": CLIENT_ID,
                "iat": now,
                "exp": now + 300,
                "auth_time": now,
                "nonce": grant.get("nonce"),
                "groups": grant["groups"],
                "preferred_username": grant["sub"],
                "email": state.email or f"{grant['sub']}@example.com",
                "sid": state.sid,
            }
            if state.email_verified is not None:
                claims["email_verified"] = state.email_verified
            if not state.auth_time:
                del claims["auth_time"]
            key = state.key
            if state.mode == "wrong_audience":
                claims["aud"] = "another-client"
            elif state.mode == "expired":
                claims.update(iat=now - 1200, exp=now - 600, auth_time=now - 1200)
            elif state.mode == "wrong_nonce":
                claims["nonce"] = "not-the-nonce"
            elif state.mode == "bad_signature":
                key = state.other_key
            elif state.mode == "wrong_issuer":
                claims["iss"] = "https://id.example.com"
            elif state.mode == "wrong_azp":
                claims.update(aud=[CLIENT_ID, "another-client"], azp="another-client")
            elif state.mode == "foreign_azp":
                claims["azp"] = "another-client"
            access = secrets.token_urlsafe(16)
            state.tokens[access] = {"sub": grant["sub"], "groups": grant["groups"]}
            if state.mode == "alg_none":
                id_token = _hand_made({"alg": "none", "typ": "JWT"}, claims, None)
            elif state.mode == "hs256":
                id_token = _hand_made({"alg": "HS256", "typ": "JWT", "kid": "test-key"}, claims, CLIENT_SECRET.encode())
            else:
                id_token = jwt.encode({"alg": "RS256", "kid": "test-key"}, claims, key)
            return {"access_token": access, "token_type": "Bearer", "expires_in": 300, "id_token": id_token}

    return Handler


def serve(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(_State(port)))
    print("ready", flush=True)
    server.serve_forever()


class BadTokenProvider:
    """The provider above as a real process on a free port."""

    def __init__(self, port: int | None = None):
        from workflows.ops.processes import free_port

        self.port = port or free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> BadTokenProvider:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.oidc_provider", str(self.port)],
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready", self.process.stderr.read()
        return self

    def control(self, **changes) -> None:
        requests.post(f"{self.issuer}/control", data={"json": json.dumps(changes)}, timeout=5).raise_for_status()

    def logout_token(self, **changes) -> str:
        """A back-channel logout token signed by this provider; a claim set
        to None is left out."""
        answer = requests.post(f"{self.issuer}/logout-token", data={"json": json.dumps(changes)}, timeout=5)
        answer.raise_for_status()
        return answer.json()["logout_token"]

    def requests(self) -> list[dict]:
        return requests.get(f"{self.issuer}/requests", timeout=5).json()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process.stdout.close()
            self.process.stderr.close()
            self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
