"""Wake-ups: asking the workers to look now. The queue carries only a task
path and ids (`workflows.tasks`); the state it points at is in the tables.
"""

from django.db import transaction
from django_q.tasks import async_task

from workflows.models import Workflow


def enqueue(func: str, *args, name: str) -> None:
    """Queue a task from inside a transaction. With the ORM broker on the
    same database it commits or rolls back with the caller's transaction;
    with another broker it is sent only after the commit. Either way the
    worker loop's sweep covers a wake-up that never arrives."""
    from django.conf import settings

    if "orm" in settings.Q_CLUSTER:
        async_task(func, *args, task_name=name)
    else:
        transaction.on_commit(lambda: async_task(func, *args, task_name=name))


def wake(workflow: Workflow) -> None:
    """Ask the workers to look at this workflow now."""
    enqueue("workflows.tasks.run_workflow", str(workflow.pk), name=f"run {workflow.pk}")
