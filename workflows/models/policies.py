"""Each action's rules: its policy, the runtime state of its limits, and
the requests to loosen it."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows import roles, teams
from workflows.models.identity import Team
from workflows.states import PolicyChangeStatus


class PolicyQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Policies and the requests to change them are every team's (an
        action is the same for all): operators and auditors read them."""
        if roles.may_read(user, "policies"):
            return self
        return self.none()


class PolicyChangeQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Changes of action policies, as `PolicyQuerySet`; changes of a
        team's Cedar policy set also to its reviewers, and those of the
        global set to every reviewer, operator and auditor."""
        action_changes = Q(policy_set_version__isnull=True)
        if not teams.is_staff_role(user):
            return self.none()
        names = list(Team.objects.visible_to(user).values_list("name", flat=True)) + [PolicySet.GLOBAL]
        set_changes = Q(policy_set_version__policy_set__name__in=names)
        if roles.may_read(user, "policies"):
            return self.filter(action_changes | set_changes)
        return self.filter(set_changes)


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
    refused, never applied over it. The same flow carries a proposed
    version of a team's Cedar policy set (`policy_set_version`)."""

    objects = PolicyChangeQuerySet.as_manager()

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
    # Set for a proposed version of a Cedar policy set (`action` is then ""):
    # authorized by a reviewer of that team (docs/explanation/policies.md#versions).
    policy_set_version = models.OneToOneField(
        "PolicySetVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="change"
    )

    class Meta:
        indexes = [models.Index(fields=["action", "status", "-created_at"], name="policy_change_action")]

    def __str__(self) -> str:
        return f"policy change {self.pk} of {self.action} ({self.status})"


class PolicySet(models.Model):
    """A team's Cedar policy set, or the global one (`name` "global"), and
    which of its versions is live (docs/explanation/policies.md#versions).
    Its row lock orders the proposals and authorizations of one set."""

    GLOBAL = "global"

    name = models.CharField(max_length=64, unique=True)
    live_version = models.PositiveIntegerField(default=0, help_text="0 while no version was ever authorized.")
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"policy set {self.name} v{self.live_version}"

    @property
    def is_global(self) -> bool:
        return self.name == self.GLOBAL


class PolicySetVersion(models.Model):
    """One proposed text of a policy set, numbered when proposed. It is
    decided through its `PolicyChange` (one each): its state is read from
    that change and from the set's live version, never stored twice."""

    policy_set = models.ForeignKey(PolicySet, on_delete=models.PROTECT, related_name="versions")
    version = models.PositiveIntegerField()
    text = models.TextField()
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    replay = models.JSONField(
        null=True,
        blank=True,
        help_text="How this text would have decided the team's last plans, replayed once when it was proposed "
        "(operations.policy_sets.replay); null for a version proposed before replays were stored.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["policy_set", "version"], name="policy_set_version_unique")]

    def __str__(self) -> str:
        return f"{self.policy_set.name} v{self.version}"

    def state(self) -> str:
        """PROPOSED, DECLINED, LIVE or SUPERSEDED."""
        change = self.change
        if change.status == PolicyChangeStatus.PENDING:
            return "PROPOSED"
        if change.status == PolicyChangeStatus.DECLINED:
            return "DECLINED"
        return "LIVE" if self.policy_set.live_version == self.version else "SUPERSEDED"
