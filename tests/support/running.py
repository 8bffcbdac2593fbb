"""The engine driven in-process, as a worker's loop and tasks would drive
it, and waits on the database for what real workers do."""

import time

from workflows.models import Workflow


def wait_for_status(workflow_id, statuses, timeout=30.0):
    """Poll the database until the workflow reaches one of `statuses`."""
    if isinstance(statuses, str):
        statuses = {statuses}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True).first()
        if status in statuses:
            return status
        time.sleep(0.1)
    raise AssertionError(f"workflow {workflow_id} stayed {status}, expected one of {sorted(statuses)}")


def run_until(workflow_id, statuses, timeout=30.0):
    """Drive the engine in-process (as a worker's loop and tasks would) until
    the workflow reaches one of `statuses`."""
    from workflows.engine import execution, recovery

    if isinstance(statuses, str):
        statuses = {statuses}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recovery.recover_expired_leases()
        execution.drain(budget_seconds=1)
        status = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True).first()
        if status in statuses:
            return status
        time.sleep(0.05)
    raise AssertionError(f"workflow {workflow_id} stayed {status}, expected one of {sorted(statuses)}")


def run_job(job_id, limit=1000):
    """Advance a bulk job in-process, batch after batch, as worker tasks
    would (`workflows.tasks.advance_job`), until it is no longer RUNNING."""
    from workflows.models import Job
    from workflows.operations import bulk

    for _ in range(limit):
        job = Job.objects.get(pk=job_id)
        if job.status != Job.Status.RUNNING:
            return job
        bulk.advance(job.pk, job.batch)
    raise AssertionError(f"job {job_id} did not finish in {limit} batches")
