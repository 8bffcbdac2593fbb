"""The cipher of webhook secrets at rest: Fernet keys from
WEBHOOK_SECRET_KEYS, the first encrypts and every key decrypts (rotate by
putting a new key first and keeping the old ones listed). Kept apart from
the models so that settings can check the keys at start-up."""

from __future__ import annotations

import os
import time
from functools import cache

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def parse_fernet_keys(raw: list[str], *, name: str = "WEBHOOK_SECRET_KEYS") -> MultiFernet:
    """The keys as one MultiFernet; a bad key stops start-up with a message
    naming the variable and the key's position (never the key)."""
    fernets = []
    for number, key in enumerate(raw, start=1):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"{name}: key {number} is not a Fernet key (32 url-safe base64-encoded bytes; make one with "
                "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
            ) from None
    if not fernets:
        raise ImproperlyConfigured(f"{name} names no key")
    return MultiFernet(fernets)


@cache
def cipher() -> MultiFernet:
    if settings.WEBHOOK_SECRET_KEYS:
        return parse_fernet_keys(settings.WEBHOOK_SECRET_KEYS)
    if not settings.DEBUG:
        raise ImproperlyConfigured("WEBHOOK_SECRET_KEYS must be set to make or use webhook secrets when DEBUG is "
                                   "off (comma-separated Fernet keys, see README: Webhooks)")
    return parse_fernet_keys([_development_key()], name=str(settings.VAR_DIR / "webhook-key"))


def _development_key() -> str:
    """A random key kept in VAR_DIR, created once by whichever process gets
    there first (O_EXCL), read by the others."""
    path = settings.VAR_DIR / "webhook-key"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(Fernet.generate_key().decode() + "\n")
    for _ in range(50):  # the creator may still be writing
        if text := path.read_text().strip():
            return text
        time.sleep(0.02)
    raise ImproperlyConfigured(f"{path} is empty: delete it to have a new development key generated")
