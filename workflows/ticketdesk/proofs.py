"""The desk as a receiver that refuses what no person approved (docs/explanation/approval-proofs.md#approval-proof):
with ``--require-approval-proof``, every write to ``/tickets`` must carry a
valid ``Approval-Proof`` for exactly that request, or it is answered 403
``approval_proof_invalid`` and changes nothing. The test-only paths
(``/_faults``, ``/_reset``, ``/_concurrency``) and reads need none.

The key set comes from ``--jwks``: a file, or the console's
``/.well-known/jwks.json`` (https, or http to a loopback host). A proof
naming a key id the set lacks makes the desk fetch the set again (at most
once every ``REFRESH_SECONDS``), so a key the console rotated in is
learned without a restart.
"""

from __future__ import annotations

import threading
import time

from durableconsole import proof
from workflows.ticketdesk.errors import DeskError

WRITES = ("POST", "PUT", "PATCH", "DELETE")
REFRESH_SECONDS = 5.0
REFUSED = "approval_proof_invalid"


def guarded(method: str, path: str) -> bool:
    """Whether a request changes tickets (and so needs a proof)."""
    return method in WRITES and (path == "/tickets" or path.startswith("/tickets/"))


class ProofGate:
    def __init__(self, jwks_source: str, audience: str, leeway: int = 30):
        if proof.origin(audience) != audience.rstrip("/"):
            raise ValueError(f"--audience must be an origin such as https://desk.example.com, not {audience!r}")
        self.source = jwks_source
        self.audience = audience.rstrip("/")
        self.leeway = leeway
        self._lock = threading.Lock()
        self.jwks = proof.load_jwks(jwks_source)
        self._refetched: float | None = None

    def _refetch(self) -> bool:
        """Read the key set again, unless that was done moments ago (a
        stream of made-up key ids costs one fetch per REFRESH_SECONDS)."""
        with self._lock:
            if self._refetched is not None and time.monotonic() - self._refetched < REFRESH_SECONDS:
                return False
            self._refetched = time.monotonic()
            try:
                self.jwks = proof.load_jwks(self.source)
            except (OSError, ValueError):
                return False
            return True

    def check(self, method: str, target: str, body: bytes, headers) -> dict:
        """The ledger's record of a valid proof for this request (`target`:
        the path and query as received), or a 403 DeskError."""
        token = headers.get(proof.HEADER)
        request = {
            "method": method,
            "url": f"{self.audience}{target}",
            "body": body,
            "idempotency_key": headers.get("Idempotency-Key"),
            "audience": self.audience,
            "leeway": self.leeway,
        }
        try:
            try:
                claims = proof.verify(token, jwks=self.jwks, **request)
            except proof.UnknownKey:
                if not self._refetch():
                    raise
                claims = proof.verify(token, jwks=self.jwks, **request)
        except proof.InvalidProof as exc:
            raise DeskError(403, REFUSED, f"approval proof refused: {exc}") from None
        return {
            "wf": claims["wf"],
            "approvers": claims["approvers"],
            "kid": proof.header_of(token)["kid"],
            "jti": claims["jti"],
        }
