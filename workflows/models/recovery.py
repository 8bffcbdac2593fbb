"""What is left when a step fails for good and how it is put right:
traces, dead letters and compensations."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows import roles, teams
from workflows.models.plans import Attempt, Step, Workflow
from workflows.states import CompensationStatus, FailureClass


class CompensationQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Those of the workflows of the user's teams, for every role;
        agents see none."""
        if teams.is_global(user):
            return self
        if not roles.may_read(user, "compensations"):
            return self.none()
        return self.filter(workflow__team_id__in=teams.team_ids(user))


class Compensation(models.Model):
    """An explicit, authorized undo: new effects that counter completed ones."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="compensations")
    lane = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=CompensationStatus.choices, default=CompensationStatus.REQUESTED)
    reason = models.TextField()
    # [{"compensates", "key", "action", "args"}] in the order they will run.
    plan = models.JSONField(default=list)
    # [{"key", "action", "why"}]: completed effects that cannot be undone.
    irreversible = models.JSONField(default=list)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    authorized_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decision_reason = models.TextField(blank=True, default="")
    # Set when authorized: the hash of the undo steps the authorizer allowed,
    # and a MAC under the audit key `key_id` over it, the requester, the
    # authorizer and the time (`workflows.engine.binding.seal`).
    plan_hash = models.CharField(max_length=64, blank=True, default="")
    mac = models.CharField(max_length=64, blank=True, default="")
    key_id = models.CharField(max_length=32, blank=True, default="")
    deadline = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = CompensationQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "lane"], name="compensation_lane_unique"),
            models.UniqueConstraint(
                fields=["workflow"],
                condition=Q(status__in=["REQUESTED", "AUTHORIZED", "RUNNING"]),
                name="one_open_compensation_per_workflow",
            ),
        ]
        indexes = [models.Index(fields=["status", "-created_at"], name="compensation_status")]

    def __str__(self) -> str:
        return f"compensation {self.lane} of {self.workflow_id} ({self.status})"


class Trace(models.Model):
    """Redacted detail of a failure; dead letters point here, never copy payloads."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="traces")
    attempt = models.ForeignKey(Attempt, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    failure_class = models.CharField(max_length=32, choices=FailureClass.choices)
    error = models.TextField(blank=True, default="")
    request = models.JSONField(default=dict)
    timings = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)


class DeadLetterQuerySet(models.QuerySet):
    def open(self):
        return self.filter(status=DeadLetter.Status.OPEN)

    def chosen(
        self, *, ids=None, status=None, action=None, failure_class=None, workflow=None, older_than=None, team=None
    ):
        """The one filter of dead letters (the API's list and bulk selections,
        the console's list, `replay_dead_letters`): each part given narrows;
        `older_than` is a timedelta (`workflows.ages.parse_age`)."""
        parts = {
            "pk__in": ids,
            "status": status,
            "action": action,
            "failure_class": failure_class,
            "workflow_id": workflow,
            "created_at__lte": timezone.now() - older_than if older_than else None,
            "workflow__team__name": team,
        }
        return self.filter(**{name: value for name, value in parts.items() if value})

    def visible_to(self, user):
        """Those of the workflows the user sees (`WorkflowQuerySet.visible_to`),
        for operators and auditors and for the agent that submitted them;
        none for a reviewer (they decide plans, operators mend failures)."""
        if teams.is_global(user):
            return self
        if not roles.may_read(user, "dead_letters"):
            return self.none()
        if teams.is_staff_role(user):
            return self.filter(
                Q(workflow__team_id__in=teams.team_ids(user))
                | Q(workflow__submitted_by=user, **teams.token_team(user, "workflow__"))
            )
        return self.filter(workflow__submitted_by=user, **teams.token_team(user, "workflow__"))


class DeadLetter(models.Model):
    class Status(models.TextChoices):
        OPEN = "OPEN"
        REPLAYED = "REPLAYED"
        DISCARDED = "DISCARDED"
        COMPENSATED = "COMPENSATED"
        # A reconciliation found the effect had happened: the step completed
        # with the outcome found, nothing was run again.
        APPLIED = "APPLIED"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="dead_letters")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="dead_letters")
    action = models.CharField(max_length=64)
    step_key = models.CharField(max_length=64)
    failure_class = models.CharField(max_length=32, choices=FailureClass.choices)
    attempt_count = models.PositiveIntegerField()
    trace = models.ForeignKey(Trace, on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolution_reason = models.TextField(blank=True, default="")

    objects = DeadLetterQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["step"], condition=Q(status="OPEN"), name="one_open_dead_letter_per_step"),
        ]
        indexes = [
            # Newest first, as lists page (`pagination.page_by_created`): walked
            # in that order and stopped at the page, a status's or everyone's.
            models.Index(fields=["status", "-created_at", "-id"], name="dead_letter_status"),
            models.Index(fields=["-created_at", "-id"], name="dead_letter_created"),
            models.Index(fields=["action", "failure_class"], name="dead_letter_filters"),
        ]

    def __str__(self) -> str:
        return f"dead letter {self.pk} ({self.step_key}, {self.failure_class}, {self.status})"
