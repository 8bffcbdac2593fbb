"""Bulk work over many dead letters: jobs and their frozen items."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows import roles, teams
from workflows.models.recovery import DeadLetter


class JobQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Its creator's, and the people's of its team (the one team all its
        entries belong to; a job across teams has none); a global user sees
        every job. Operators and auditors only, as dead letters."""
        if teams.is_global(user):
            return self
        if not roles.may_read(user, "jobs"):
            return self.none()
        return self.filter(Q(created_by=user, **teams.token_team(user)) | Q(team_id__in=teams.team_ids(user)))


class Job(models.Model):
    """A reconciliation or a replay of many dead letters, advanced in bounded
    batches by worker tasks (`workflows.operations.bulk`). Its selection is
    frozen into `JobItem`s when it is made, so its progress (done / failed /
    remaining) is read from the database and survives a reload or a worker
    restart."""

    class Kind(models.TextChoices):
        RECONCILE = "reconcile"
        REPLAY = "replay"

    class Status(models.TextChoices):
        RUNNING = "RUNNING"
        PAUSED = "PAUSED"
        DONE = "DONE"

    class Only(models.TextChoices):
        SAFE = "safe"
        ALL = "all"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    dry_run = models.BooleanField(default=False)
    only = models.CharField(max_length=8, choices=Only.choices, default=Only.SAFE)
    filter = models.JSONField(default=dict)
    reason = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    team = models.ForeignKey("Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Bumped by each batch as it commits: a batch task runs only while the
    # job still carries the number it was queued with, so a task delivered
    # twice (or a stalled job's kick racing its own batch) does nothing twice.
    batch = models.PositiveIntegerField(default=0)
    # The worker process running the current batch (empty between batches).
    owner = models.CharField(max_length=200, blank=True, default="")

    objects = JobQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["status", "updated_at"], name="job_status")]

    def __str__(self) -> str:
        return f"{self.kind} job {self.pk} ({self.status})"


class JobItem(models.Model):
    class State(models.TextChoices):
        PENDING = "PENDING"
        APPLIED = "APPLIED"
        SAFE = "SAFE"
        IN_DOUBT = "IN_DOUBT"
        REPLAYED = "REPLAYED"
        FAILED = "FAILED"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="items")
    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    detail = models.CharField(max_length=500, blank=True, default="")
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "dead_letter"], name="job_item_unique")]
        indexes = [models.Index(fields=["job", "state"], name="job_item_state")]
