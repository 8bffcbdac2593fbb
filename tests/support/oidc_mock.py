"""oidc-provider-mock (from the package index) as a real provider process
for the browser tests that sign in through it."""

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests

from workflows.ops.processes import free_port


@contextmanager
def running_provider(logs: Path, *user_claims: str):
    """The provider's issuer URL while it runs, nonces required; each
    `user_claims` is a predefined person's claims as JSON."""
    port = free_port()
    extra = [arg for claims in user_claims for arg in ("--user-claims", claims)]
    with open(logs / "out.log", "w") as out, open(logs / "err.log", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), "--require-nonce", *extra],
            stdout=out,
            stderr=err,
        )
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"{issuer}/.well-known/openid-configuration", timeout=1).raise_for_status()
                break
            except requests.RequestException:
                assert process.poll() is None and time.monotonic() < deadline, (logs / "err.log").read_text()
                time.sleep(0.1)
        yield issuer
    finally:
        process.terminate()
        process.wait(timeout=10)


def set_person(issuer: str, sub: str, **claims) -> None:
    """What the provider says of `sub` at their next sign-in."""
    requests.put(f"{issuer}/users/{sub}", json=claims, timeout=5).raise_for_status()
