"""Standing grants: a reviewer's time-boxed, use-counted approval of one
agent's steps of one action under one Cedar condition, and the operation
keys each use was taken for (docs/explanation/policies.md#standing-grants)."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from workflows import teams
from workflows.models.identity import Team
from workflows.states import GrantStatus

LIVE = (GrantStatus.ACTIVE, GrantStatus.EXHAUSTED)
OPEN = (GrantStatus.PENDING, GrantStatus.ACTIVE, GrantStatus.EXHAUSTED)


class StandingGrantQuerySet(models.QuerySet):
    def visible_to(self, user):
        """The grants of the user's teams (every team's for a global user);
        an agent reads the grants given to it."""
        if teams.is_global(user):
            return self
        if teams.is_staff_role(user):
            return self.filter(team_id__in=teams.team_ids(user))
        if user.is_authenticated and user.is_active:
            return self.filter(agent=user)
        return self.none()

    def live(self, now=None):
        """Backing what they approved: active or used up, not revoked, and
        `until` not reached (reads never wait for the worker to mark one
        EXPIRED)."""
        return self.filter(status__in=LIVE, until__gt=now or timezone.now())

    def usable(self, now=None):
        """Able to approve one more step: active, a use left, not expired."""
        return self.filter(status=GrantStatus.ACTIVE, uses__lt=F("max_uses"), until__gt=now or timezone.now())

    def lapsed(self, now=None):
        """Not ended by anyone, though `until` passed: waiting to be marked EXPIRED."""
        return self.filter(status__in=OPEN, until__lte=now or timezone.now())


class StandingGrant(models.Model):
    """`granted_by` approves in advance the steps of `action` that `agent`
    submits and `condition` holds on, up to `max_uses` operation keys,
    until `until`. On a destructive or irreversible action it is PENDING
    until `authorized_by`, another reviewer, authorizes it."""

    objects = StandingGrantQuerySet.as_manager()

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The agent's team when granted: whose people see, authorize and revoke it.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    agent = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="standing_grants")
    action = models.CharField(max_length=64)
    # One Cedar condition expression, as the grantor wrote it.
    condition = models.TextField()
    max_uses = models.PositiveIntegerField()
    uses = models.PositiveIntegerField(default=0)
    until = models.DateTimeField()
    status = models.CharField(max_length=16, choices=GrantStatus.choices)
    # Whether the action was destructive or irreversible when granted: then
    # a second reviewer authorized it before its first use.
    needs_second = models.BooleanField(default=False)
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    authorized_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    authorized_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(max_uses__gte=1), name="grant_max_uses_positive"),
            models.CheckConstraint(condition=Q(uses__lte=F("max_uses")), name="grant_uses_within_max"),
            models.CheckConstraint(condition=Q(until__gt=F("created_at")), name="grant_ends_after_it_starts"),
        ]
        indexes = [
            models.Index(fields=["agent", "action", "status"], name="grant_agent_action"),
            models.Index(fields=["until"], condition=Q(status__in=OPEN), name="grant_open_until"),
        ]

    def __str__(self) -> str:
        return f"grant {self.pk} of {self.action} to {self.agent_id} ({self.status})"

    @property
    def basis(self) -> str:
        """What an approval by this grant names (and its proof carries)."""
        return f"grant:{self.pk}"


class GrantUse(models.Model):
    """One use of a grant: the operation key of the step it approved. The
    unique pair makes a step approved twice (a retry, a replay, a second
    worker) count once."""

    grant = models.ForeignKey(StandingGrant, on_delete=models.PROTECT, related_name="used_by")
    operation_key = models.CharField(max_length=128)
    workflow_id = models.UUIDField(null=True, blank=True)
    used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["grant", "operation_key"], name="grant_use_once_per_key")]

    def __str__(self) -> str:
        return f"use of grant {self.grant_id} by {self.operation_key}"
