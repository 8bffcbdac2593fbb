"""Status announcements: the transaction that moves workflows to a status a
waiter may be waiting for also says so, for the web processes that answer
`GET /api/v1/workflows/{id}/wait` (workflows.web.waiting).

On PostgreSQL (with `Q_LISTEN` on) it sends `NOTIFY durableconsole_status`
with the payload `<workflow id> <new status>`, which PostgreSQL delivers
at commit and drops with a rollback, so a waiter never hears of a status
that did not happen. Elsewhere (SQLite, or a pooler in transaction mode
where LISTEN does not work) the web processes read the statuses they watch
instead, and nothing is sent.
"""

from uuid import UUID

from django.conf import settings
from django.db import connection

from workflows.states import SETTLED_WORKFLOW, WorkflowStatus

CHANNEL = "durableconsole_status"


def enabled() -> bool:
    return connection.vendor == "postgresql" and settings.Q_LISTEN


def answers_waiters(current: str, target: str) -> bool:
    """A decision (any move out of PLANNED), or an end a waiter waits for.
    Other moves are not announced: every NOTIFY takes PostgreSQL's queue
    lock at commit, and no waiter would wake for them."""
    return current == WorkflowStatus.PLANNED or target in SETTLED_WORKFLOW


def workflows_moved(ids: list, current: str, target: str) -> None:
    """Announce, in the caller's transaction, that these workflows moved
    from `current` to `target`."""
    if not ids or not answers_waiters(current, target) or not enabled():
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
            [CHANNEL, [f"{pk} {target}" for pk in ids]],
        )


def parse(payload: str) -> tuple[UUID, str] | None:
    """(workflow id, status) of an announcement; None for anything else on the channel."""
    workflow_id, _, status = payload.partition(" ")
    try:
        return UUID(workflow_id), WorkflowStatus(status)
    except ValueError:
        return None
