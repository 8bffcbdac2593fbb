"""Each action's rules: its policy, the runtime state of its limits, and
the requests to loosen it."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows import roles
from workflows.states import PolicyChangeStatus


class PolicyQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Policies and the requests to change them are every team's (an
        action is the same for all): operators and auditors read them."""
        if roles.may_read(user, "policies"):
            return self
        return self.none()


class ActionPolicy(models.Model):
    """Current rules for one action. Every change bumps `version`; attempts
    record the version they ran under."""

    objects = PolicyQuerySet.as_manager()

    class Risk(models.TextChoices):
        LOW = "LOW"
        MEDIUM = "MEDIUM"
        HIGH = "HIGH"

    action = models.CharField(max_length=64, unique=True)
    enabled = models.BooleanField(default=True, help_text="Kill switch: when off, no attempt of this action starts.")
    risk = models.CharField(max_length=8, choices=Risk.choices, default=Risk.LOW)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    approval_ttl_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="For high-risk actions: an approval older than this no longer counts."
    )
    max_attempts = models.PositiveSmallIntegerField(default=5)
    # Cluster-wide limits enforced at claim time (`workflows.engine.limits`);
    # null is unlimited.
    max_in_flight = models.PositiveIntegerField(
        null=True, blank=True, help_text="Steps of this action RUNNING at once, across every worker and host."
    )
    rate_per_second = models.FloatField(
        null=True, blank=True, help_text="Claims per second across the cluster (a token bucket of one second)."
    )
    # The review every plan using this action gets unless the plan sets its
    # own (docs/explanation/review.md#review): a deadline (seconds from submission), a reminder so
    # many seconds before it, and the group told once it passes.
    review_deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    review_reminder_seconds = models.PositiveIntegerField(null=True, blank=True)
    escalation_group = models.CharField(max_length=150, null=True, blank=True)
    # The Django group whose members alone may approve (and gate-approve) a
    # plan using this action; "" lets any reviewer (docs/explanation/teams.md#teams).
    reviewer_group = models.CharField(max_length=150, blank=True, default="", db_default="")
    # Off: plans using this action are decided in the console only; their
    # chat messages offer only Open (docs/guides/slack-reviewers.md#only-open).
    chat_decisions = models.BooleanField(default=True, db_default=True)
    version = models.PositiveIntegerField(default=1)
    updated_by = models.CharField(max_length=150, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "action policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(max_in_flight__isnull=True) | Q(max_in_flight__gte=1), name="policy_max_in_flight_positive"
            ),
            models.CheckConstraint(
                condition=Q(rate_per_second__isnull=True) | Q(rate_per_second__gt=0), name="policy_rate_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} v{self.version}"


class ActionThrottle(models.Model):
    """Runtime state of an action's limits, apart from its policy so that it
    changes without a new policy version: the token bucket's level at
    `refilled_at`, and a pause for everyone after a remote answered
    RATE_LIMITED. Its row lock orders the claims of a limited action."""

    action = models.CharField(max_length=64, primary_key=True)
    tokens = models.FloatField(default=0.0)
    # None: never drawn from, the bucket is full.
    refilled_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"throttle of {self.action}"


class PolicyChange(models.Model):
    """An operator's request to loosen an action's policy, applied only when
    another operator authorizes it (docs/explanation/concurrency.md#effects-in-flight). `base_version` is the policy
    version it was asked against: a request made stale by a later change is
    refused, never applied over it."""

    objects = PolicyQuerySet.as_manager()

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    action = models.CharField(max_length=64)
    changes = models.JSONField()
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=PolicyChangeStatus.choices, default=PolicyChangeStatus.PENDING)
    base_version = models.PositiveIntegerField()
    applied_version = models.PositiveIntegerField(null=True, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decision_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["action", "status", "-created_at"], name="policy_change_action")]

    def __str__(self) -> str:
        return f"policy change {self.pk} of {self.action} ({self.status})"
