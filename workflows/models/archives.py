"""Plans moved out of the tables: each archive run and what it took."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows import teams
from workflows.models.identity import Team


class Archive(models.Model):
    """One run of `manage.py archive` (docs/explanation/operations-at-scale.md#operations-at-scale): where its files
    went and the digest of its signed manifest, which the `audit.archived` events
    of the live chain carry too. What verification trusts is those events
    and the manifest's signature, never this row."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    by = models.CharField(max_length=150)
    location = models.CharField(max_length=1000)
    manifest_digest = models.CharField(max_length=64)
    workflows = models.PositiveIntegerField()
    # Removed from the tables so far (a workflow changed after it was
    # written out is kept, and stays out of this count).
    deleted = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"archive {self.pk} of {self.created_at:%Y-%m-%d} ({self.workflows} workflows)"


class ArchivedWorkflowQuerySet(models.QuerySet):
    def visible_to(self, user):
        """As `WorkflowQuerySet.visible_to`: an archived plan is announced
        only to those who saw it while it lived."""
        if teams.is_global(user):
            return self
        if teams.is_staff_role(user):
            return self.filter(Q(team_id__in=teams.team_ids(user)) | Q(submitted_by=user, **teams.token_team(user)))
        return self.filter(submitted_by=user, **teams.token_team(user))


class ArchivedWorkflow(models.Model):
    """A workflow moved out to an archive: what the console says instead
    of 404 ("archived on DATE"), and, on PostgreSQL, the row the audit
    trigger checks before it lets the archive delete the stream's events
    (up to `seq`, inside the archive's own transaction)."""

    workflow_id = models.UUIDField(primary_key=True)
    archive = models.ForeignKey(Archive, on_delete=models.PROTECT, related_name="archived")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    archived_at = models.DateTimeField(default=timezone.now)
    # The stream's head as archived.
    seq = models.PositiveBigIntegerField()
    head = models.CharField(max_length=64)
    restored_at = models.DateTimeField(null=True, blank=True)

    objects = ArchivedWorkflowQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} ({self.status}), archived {self.archived_at:%Y-%m-%d}"
