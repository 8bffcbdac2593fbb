"""Webhook signing secrets: made, stored encrypted, rotated, and used to sign.

A secret is `whsec_` + base64 of 32 random bytes, shown once when made.
The database holds it only encrypted (`workflows.webhooks.cipher`).
Signing follows Standard Webhooks: `v1,` + base64 HMAC-SHA256 under the
decoded secret of `id.timestamp.body`, one signature per live secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import timedelta

from cryptography.fernet import InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from workflows.webhooks.cipher import cipher
from workflows.webhooks.models import WebhookSecret

PREFIX = "whsec_"


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def store(secret: str, *, user=None, endpoint=None) -> WebhookSecret:
    return WebhookSecret.objects.create(
        user=user, endpoint=endpoint, encrypted=cipher().encrypt(secret.encode()).decode()
    )


def issue(*, user=None, endpoint=None, rotate: bool = False) -> str:
    """A new secret for this owner, returned once. Without `rotate` it
    replaces the owner's secrets at once; with it, they keep signing for
    WEBHOOK_ROTATION_HOURS so that receivers can switch over."""
    owner = Q(user=user) if user is not None else Q(endpoint=endpoint)
    secret = new_secret()
    with transaction.atomic():
        if rotate:
            # No secret signs past the overlap, however long an earlier rotation gave it.
            cutoff = timezone.now() + timedelta(hours=settings.WEBHOOK_ROTATION_HOURS)
            WebhookSecret.objects.filter(owner).filter(Q(retires_at__isnull=True) | Q(retires_at__gt=cutoff)).update(
                retires_at=cutoff
            )
        else:
            WebhookSecret.objects.filter(owner).delete()
        store(secret, user=user, endpoint=endpoint)
    return secret


def live_secrets(*, user_id=None, endpoint_id=None) -> list[bytes]:
    """The decoded keys that sign for this owner now, newest first."""
    owner = Q(user_id=user_id) if user_id is not None else Q(endpoint_id=endpoint_id)
    rows = (
        WebhookSecret.objects.filter(owner)
        .filter(Q(retires_at__isnull=True) | Q(retires_at__gt=timezone.now()))
        .order_by("-created_at", "-id")
    )
    keys = []
    for row in rows:
        try:
            secret = cipher().decrypt(row.encrypted.encode()).decode()
        except InvalidToken:
            raise ImproperlyConfigured(
                "a webhook secret does not decrypt under WEBHOOK_SECRET_KEYS: keep the key that encrypted it listed"
            ) from None
        keys.append(base64.b64decode(secret.removeprefix(PREFIX)))
    return keys


def has_secret(user) -> bool:
    return (
        WebhookSecret.objects.filter(user=user)
        .filter(Q(retires_at__isnull=True) | Q(retires_at__gt=timezone.now()))
        .exists()
    )


def signature(keys: list[bytes], webhook_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode() for key in keys)
