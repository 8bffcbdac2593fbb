"""The cipher of webhook secrets at rest: Fernet keys from
WEBHOOK_SECRET_KEYS, the first encrypts and every key decrypts (rotate by
putting a new key first and keeping the old ones listed). Kept apart from
the models so that settings can check the keys at start-up."""

from __future__ import annotations

from functools import cache

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from workflows.audit.keys import development_secret


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
        raise ImproperlyConfigured(
            "WEBHOOK_SECRET_KEYS must be set to make or use webhook secrets when DEBUG is "
            "off (comma-separated Fernet keys, see docs/guides/operators.md#rotate-keys-and-secrets)"
        )
    return parse_fernet_keys([_development_key()], name=str(settings.VAR_DIR / "webhook-key"))


def _development_key() -> str:
    return development_secret("webhook-key", lambda: Fernet.generate_key().decode())
