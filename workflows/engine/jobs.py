"""Keeping bulk jobs moving (`workflows.operations.bulk`).

Each batch of a job queues the next one in its own commit, so a job stalls
only when the task carrying its next batch is lost: its worker was killed
mid-batch (the batch's transaction rolled back, its queue row stays locked
for Q_RETRY) or a wake-up sent after commit never arrived. The worker loop
asks here every tick and queues the batch again. A batch task runs only
while the job still carries its batch number, so a kick that races a live
batch changes nothing.
"""

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from workflows import queue
from workflows.engine.leases import LOCAL_PREFIX, process_alive
from workflows.models import Job

# A batch holds its job this long at most before the loop queues it again
# (a batch's lookups run LOOKUPS_AT_ONCE at a time, each bounded by the
# action's timeout); a batch whose process on this host died is queued again
# at once.
STALL_SECONDS = 60


def kick_stalled(now=None) -> int:
    """Queue the current batch of every running job that nobody advances."""
    now = now or timezone.now()
    running = Job.objects.filter(status=Job.Status.RUNNING)
    stale = running.filter(updated_at__lt=now - timedelta(seconds=STALL_SECONDS))
    dead = [
        owner
        for owner in running.filter(owner__startswith=f"{LOCAL_PREFIX}:")
        .order_by()
        .values_list("owner", flat=True)
        .distinct()
        if not process_alive(owner)
    ]
    kicked = 0
    for job in running.filter(Q(pk__in=stale.values("pk")) | Q(owner__in=dead)).only("pk", "batch", "owner"):
        # Touched first, under the batch number read: one kick per stall.
        if Job.objects.filter(pk=job.pk, batch=job.batch, owner=job.owner).update(owner="", updated_at=now):
            queue.enqueue("workflows.tasks.advance_job", str(job.pk), job.batch, name=f"job {job.pk}")
            kicked += 1
    return kicked
