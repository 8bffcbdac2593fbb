"""Keyset pagination: stable under inserts, never counts the table."""

import base64
import json
from datetime import datetime

from django.db.models import Q

from workflows.errors import DomainError


class BadCursor(DomainError):
    code = "invalid_cursor"


def encode(*values) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else str(v) for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str, size: int) -> list[str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
    except (ValueError, UnicodeDecodeError):
        raise BadCursor("The cursor is not valid.") from None
    if not isinstance(values, list) or len(values) != size or not all(isinstance(v, str) for v in values):
        raise BadCursor("The cursor is not valid.")
    return values


def page_by_created(queryset, cursor: str | None, limit: int):
    """Newest first by (created_at, id)."""
    if cursor:
        created, pk = decode(cursor, 2)
        try:
            created_at = datetime.fromisoformat(created)
        except ValueError:
            raise BadCursor("The cursor is not valid.") from None
        queryset = queryset.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    next_cursor = encode(rows[limit - 1].created_at, rows[limit - 1].pk) if len(rows) > limit else None
    return rows[:limit], next_cursor


def page_by_id(queryset, cursor: str | None, limit: int, *, newest_first: bool = True):
    if cursor:
        (pk,) = decode(cursor, 1)
        if not pk.isdigit():
            raise BadCursor("The cursor is not valid.")
        queryset = queryset.filter(id__lt=int(pk)) if newest_first else queryset.filter(id__gt=int(pk))
    rows = list(queryset.order_by("-id" if newest_first else "id")[: limit + 1])
    next_cursor = encode(rows[limit - 1].pk) if len(rows) > limit else None
    return rows[:limit], next_cursor
