"""django-q2 entry points: thin, idempotent, ids only.

The queue only says "look now"; each task re-reads the database and does
just what is due, so duplicated or late deliveries are harmless.
"""

from workflows import execution


def run_workflow(workflow_id: str) -> int:
    return execution.run_workflow(workflow_id)


def drain() -> int:
    return execution.drain()
