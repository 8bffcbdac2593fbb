"""The audit key set (docs/explanation/trust-core.md#keyed-audit): HMAC-SHA256 keys that chain new audit
events and seal approvals. Keys never live in the database.

`AUDIT_KEYS` = `kid1:secret1,kid2:secret2`: the first key signs, every key
verifies (rotation: put the new key first and keep the old one listed while
rows it sealed are still checked). Without `DEBUG` the setting is required;
with `DEBUG=1` and none set, a random key is generated once into
`VAR_DIR/audit-key` and shared by every process of this checkout (never a
fixed, published key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,32}$")
MIN_SECRET_LENGTH = 16


@dataclass(frozen=True)
class AuditKey:
    kid: str
    secret: bytes

    def __repr__(self) -> str:  # never print the secret
        return f"AuditKey({self.kid!r})"

    def mac(self, text: str) -> str:
        """HMAC-SHA256 of `text` (UTF-8) under this key, as hex."""
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()


def parse(raw: str, *, name: str = "AUDIT_KEYS") -> list[AuditKey]:
    """`kid:secret,kid:secret` → keys, first the signing one. A bad value
    stops start-up with a message naming the variable (never the secret)."""
    keys: list[AuditKey] = []
    for number, item in enumerate((part.strip() for part in raw.split(",")), start=1):
        if not item:
            continue
        kid, sep, secret = item.partition(":")
        if not sep or not KEY_ID.match(kid):
            raise ImproperlyConfigured(
                f"{name}: entry {number} must be kid:secret, the kid 1-32 of letters, digits, '.', '_' or '-'"
            )
        if len(secret) < MIN_SECRET_LENGTH:
            raise ImproperlyConfigured(
                f"{name}: the secret of key {kid!r} must be at least {MIN_SECRET_LENGTH} characters"
            )
        if any(key.kid == kid for key in keys):
            raise ImproperlyConfigured(f"{name}: key id {kid!r} is listed twice")
        keys.append(AuditKey(kid, secret.encode()))
    return keys


@cache
def audit_keys() -> tuple[AuditKey, ...]:
    keys = parse(settings.AUDIT_KEYS) if settings.AUDIT_KEYS else []
    if keys:
        return tuple(keys)
    if not settings.DEBUG:
        raise ImproperlyConfigured(
            "AUDIT_KEYS must be set when DEBUG is off (kid:secret, see docs/deploying.md#what-runs)"
        )
    return (_development_key(),)


def current() -> AuditKey:
    """The key that seals what is written now."""
    return audit_keys()[0]


def by_id(kid: str) -> AuditKey | None:
    return next((key for key in audit_keys() if key.kid == kid), None)


def as_setting() -> str:
    """The keys in use as an AUDIT_KEYS value, for a child process started
    with DEBUG off (the bench's clusters) that must chain with this one."""
    return ",".join(f"{key.kid}:{key.secret.decode()}" for key in audit_keys())


def _development_key() -> AuditKey:
    key = development_secret("audit-key", lambda: f"dev-{secrets.token_hex(4)}:{secrets.token_urlsafe(32)}")
    return parse(key, name=str(settings.VAR_DIR / "audit-key"))[0]


def development_secret(filename: str, make) -> str:
    """A random development secret kept in VAR_DIR/`filename`, created once
    (by `make()`) by whichever process gets there first (O_EXCL), read by
    the others."""
    path = settings.VAR_DIR / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(make() + "\n")
    for _ in range(50):  # the creator may still be writing
        if text := path.read_text().strip():
            return text
        time.sleep(0.02)
    raise ImproperlyConfigured(f"{path} is empty: delete it to have a new development key generated")
