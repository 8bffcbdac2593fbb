"""Keyset pagination: stable under inserts, never counts the table.

A cursor comes back from the client, so it is input like any other: every
part of it is checked to be what `encode` could have written (an aware time
inside the calendar, a key of the right type and range) before it reaches a
query, and anything else is a `BadCursor` (400), never a server error.
"""

import base64
import json
import re
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from workflows.engine import planning
from workflows.errors import DomainError

# Integer primary keys are 64-bit; ASCII digits only (str.isdigit also accepts '٣' and '²').
INTEGER_KEY = re.compile(r"[0-9]{1,19}")
MAX_INTEGER_KEY = 2**63 - 1


class BadCursor(DomainError):
    code = "invalid_cursor"

    def __init__(self, message: str = "The cursor is not valid: use the `next` value of a previous page as it is."):
        super().__init__(message)


def encode(*values) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else str(v) for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str, size: int) -> list[str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
    except (ValueError, UnicodeError):
        raise BadCursor() from None
    if not isinstance(values, list) or len(values) != size or not all(isinstance(v, str) for v in values):
        raise BadCursor()
    return values


def _moment(text: str) -> datetime:
    """The cursor's time in UTC: aware, as `encode` writes it, and inside the
    calendar once converted (an offset of -23:59 on 9999-12-31 is not)."""
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            raise ValueError(text)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadCursor() from None


def _key(queryset, text: str):
    try:
        return queryset.model._meta.pk.to_python(text)
    except ValidationError:
        raise BadCursor() from None


def page_by_created(queryset, cursor: str | None, limit: int):
    """Newest first by (created_at, id). The page's keys are read first, by
    themselves, walking an index in that order up to the page's end
    (`planning.fixed_plans`); then its rows, with whatever the queryset
    joins, by those keys. In one statement, with the joins, the planner,
    its statistics stale, would read every row the reader may see and sort
    them all for one page: its cost grew with the reader's whole history."""
    if cursor:
        created, pk = decode(cursor, 2)
        created_at, pk = _moment(created), _key(queryset, pk)
        queryset = queryset.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    with transaction.atomic(), planning.fixed_plans():
        keys = list(queryset.order_by("-created_at", "-id").values_list("pk", "created_at")[: limit + 1])
    found = queryset.in_bulk([pk for pk, _ in keys[:limit]])
    # A row gone between the two reads (archived, say) is left out; the cursor still follows the keys.
    rows = [found[pk] for pk, _ in keys[:limit] if pk in found]
    next_cursor = encode(keys[limit - 1][1], keys[limit - 1][0]) if len(keys) > limit else None
    return rows, next_cursor


def page_by_id(queryset, cursor: str | None, limit: int, *, newest_first: bool = True):
    if cursor:
        (pk,) = decode(cursor, 1)
        if not INTEGER_KEY.fullmatch(pk) or int(pk) > MAX_INTEGER_KEY:
            raise BadCursor()
        queryset = queryset.filter(id__lt=int(pk)) if newest_first else queryset.filter(id__gt=int(pk))
    rows = list(queryset.order_by("-id" if newest_first else "id")[: limit + 1])
    next_cursor = encode(rows[limit - 1].pk) if len(rows) > limit else None
    return rows[:limit], next_cursor
