"""The project's tables: the only source of truth for durable work.

Statuses are never assigned directly; `workflows.engine.transitions.move` changes
them and writes the audit event in the same transaction.
"""

import hashlib
import json
import uuid

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, models
from django.db.models import Q
from django.db.models.functions import Cast
from django.utils import timezone

from workflows import teams
from workflows.states import (
    AttemptStatus,
    CompensationStatus,
    FailureClass,
    PolicyChangeStatus,
    PreviewState,
    StepStatus,
    WorkflowStatus,
)


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def update_rows(model, names: list[str], objs: list) -> None:
    """Write each object's values of `names` to its row, in one statement
    (UPDATE ... FROM unnest(arrays) on PostgreSQL, FROM VALUES on SQLite),
    where Django's bulk_update builds a CASE expression per row and field."""
    if not objs:
        return
    fields = [model._meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    columns = [model._meta.pk, *fields]
    if connection.vendor == "postgresql":
        # One typed array per column: the statement's text stays the same
        # whatever the number of rows (short to send, cached by the driver).
        arrays = ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in columns)
        sets = ", ".join(f"{quote(field.column)} = v.c{n}" for n, field in enumerate(fields, start=1))
        aliases = ", ".join(f"c{n}" for n in range(len(columns)))
        params = [
            [field.get_db_prep_save(getattr(obj, field.attname), connection) for obj in objs] for field in columns
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {sets} FROM unnest({arrays}) AS v({aliases}) WHERE {table}.{pk} = v.c0", params
            )
        return
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    sets = ", ".join(f"{quote(field.column)} = v.column{n}" for n, field in enumerate(fields, start=2))
    sql = f"UPDATE {table} SET {sets} FROM (VALUES {', '.join([row] * len(objs))}) AS v WHERE {table}.{pk} = v.column1"
    params = []
    for obj in objs:
        params += [field.get_db_prep_save(getattr(obj, field.attname), connection) for field in columns]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _token_team(user, path: str = "") -> dict:
    """For anyone who came with a token: only its team's objects, their own
    included (`teams.token_team_id`)."""
    team = teams.token_team_id(user)
    return {f"{path}team_id": team} if team is not None else {}


class WorkflowQuerySet(models.QuerySet):
    def awaiting_review(self):
        return self.filter(status=WorkflowStatus.PLANNED)

    def reviewable_by(self, user):
        return self.visible_to(user).awaiting_review().exclude(submitted_by=user)

    def active(self):
        return self.filter(status__in=[WorkflowStatus.APPROVED, WorkflowStatus.RUNNING])

    def visible_to(self, user):
        """People see the plans of their teams (global roles: every team)
        and what they submitted themselves; an agent sees only what it
        submitted. Through a token, anyone sees only that token's team's
        (DESIGN §27: a token's team scopes its reads)."""
        if teams.is_global(user):
            return self
        if teams.is_staff_role(user):
            return self.filter(Q(team_id__in=teams.team_ids(user)) | Q(submitted_by=user, **_token_team(user)))
        return self.filter(submitted_by=user, **_token_team(user))


class Workflow(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # The team of the token that submitted it: only that team's people see,
    # decide and replay it (DESIGN §23).
    team = models.ForeignKey("Team", on_delete=models.PROTECT, related_name="+", default=teams.default_team_id)
    submission_key = models.CharField(max_length=200)
    submission_hash = models.CharField(max_length=64)
    plan = models.JSONField()
    plan_hash = models.CharField(max_length=64)
    context = models.JSONField(default=dict, blank=True)
    # Where the plan's events are posted, signed with the submitter's
    # webhook secret (workflows.webhooks); "" for none.
    callback_url = models.CharField(max_length=2048, blank=True, default="", db_default="")
    status = models.CharField(max_length=32, choices=WorkflowStatus.choices, default=WorkflowStatus.PLANNED)
    deadline = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The reviewer handling the plan ("I'm on it"), and when they last
    # showed it: the claim lapses REVIEW_CLAIM_MINUTES after that
    # (`operations.claims`). It only informs; it never blocks a decision.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    # When reviewers are reminded and who is told once the review deadline
    # passes (DESIGN §22), as the plan set it: `{"deadline_seconds",
    # "remind_before_seconds": [...], "escalate_to": group}`; null for none
    # (its actions' policies may still set one: `ReviewNotice`).
    review = models.JSONField(null=True, blank=True)
    # The plan's revision: 1 as submitted, one more for each reviewer's edit
    # (`operations.revisions`); an approval counts only for its revision.
    revision = models.PositiveIntegerField(default=1, db_default=1)
    # Set when `manage.py restore` brought the plan back from its archive
    # (DESIGN §24): it is shown, never changed again (a trigger refuses
    # every UPDATE of the row; `transitions.move` says why first).
    restored_at = models.DateTimeField(null=True, blank=True)

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["submitted_by", "submission_key"], name="workflow_submission_unique"),
        ]
        indexes = [
            models.Index(fields=["status", "-created_at", "id"], name="workflow_status_created"),
            models.Index(fields=["-created_at", "id"], name="workflow_created"),
            models.Index(fields=["team", "-created_at", "id"], name="workflow_team_created"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    def is_visible_to(self, user) -> bool:
        """`Workflow.objects.visible_to(user)` for this one row, without a query:
        what every operation checks before acting on it for `user`."""
        if teams.is_global(user):
            return True
        if teams.is_staff_role(user) and self.team_id in teams.team_ids(user):
            return True
        return self.submitted_by_id == user.pk and all(
            getattr(self, name) == value for name, value in _token_team(user).items()
        )

    def require_visible_to(self, user) -> None:
        """404 (as if it did not exist) for a user outside its team."""
        from workflows.errors import NotVisible

        if not self.is_visible_to(user):
            raise NotVisible("No such workflow.")

    @property
    def is_terminal(self) -> bool:
        from workflows.states import TERMINAL_WORKFLOW

        return self.status in TERMINAL_WORKFLOW

    def claim(self, now=None):
        """(reviewer, lapses at) of the claim on this plan while it awaits a
        decision, or None (unclaimed, lapsed, or decided): `operations.claims`."""
        from datetime import timedelta

        if self.claimed_by_id is None or self.claimed_at is None:
            return None
        lapses = self.claimed_at + timedelta(minutes=settings.REVIEW_CLAIM_MINUTES)
        if lapses <= (now or timezone.now()):
            return None
        if self.status != WorkflowStatus.PLANNED and not (
            self.status == WorkflowStatus.FAILED and self.steps.filter(lane=0, status=StepStatus.BLOCKED).exists()
        ):
            return None
        return self.claimed_by, lapses


def operation_key_for(workflow_id: uuid.UUID, step_key: str) -> str:
    """The stable idempotency key of one logical operation: every attempt and
    every replay of the step sends this same value."""
    return f"{workflow_id}:{step_key}"


class StepQuerySet(models.QuerySet):
    def due(self, now=None):
        now = now or timezone.now()
        # Forward steps run while the workflow runs; a compensation's steps
        # (lane > 0) run while it compensates.
        return self.filter(
            Q(lane=0, workflow__status__in=[WorkflowStatus.APPROVED, WorkflowStatus.RUNNING])
            | Q(lane__gt=0, workflow__status=WorkflowStatus.COMPENSATING),
            # Ready: next_attempt_at is set on the first step of a lane when
            # the lane may run (approval, authorization), on the next step
            # when one completes (`ready_after`), on a step put back in line
            # (replay, resolution, fresh approval) and on a retry's due time.
            status__in=[StepStatus.PENDING, StepStatus.WAITING_RETRY],
            next_attempt_at__lte=now,
        )

    def ready_after(self, steps, now=None) -> int:
        """Make the step that follows each of these (just COMPLETE) in its
        lane ready to run: one statement for them all. The next steps are
        found through their plan's positions, into a materialized list (one
        id per step, which the planner estimates as such), then updated by
        primary key from it; the
        status is compared as `status || ''`, which no index matches. With
        the ids as a subquery and no planner statistics (a burst, autovacuum
        behind), PostgreSQL read every PENDING step through the status index,
        or, with the status unindexed, the whole table, on each call: each
        group of steps completed cost more the more steps were stored."""
        if not steps:
            return 0
        now = now or timezone.now()
        quote = connection.ops.quote_name
        table = quote(self.model._meta.db_table)
        workflow_field = self.model._meta.get_field("workflow")
        values = ", ".join(["(%s, %s, %s)"] * len(steps))
        params = []
        for step in steps:
            params += [workflow_field.get_db_prep_value(step.workflow_id, connection), step.lane, step.position]
        sql = (
            f"WITH following AS MATERIALIZED (SELECT (SELECT n.id FROM {table} n WHERE n.workflow_id = v.column1"
            f" AND n.lane = v.column2 AND n.position > v.column3 ORDER BY n.position LIMIT 1) AS id"
            f" FROM (VALUES {values}) AS v)"
            f" UPDATE {table} SET next_attempt_at = %s FROM following WHERE {table}.id = following.id"
            f" AND {table}.status || '' = %s AND {table}.next_attempt_at IS NULL"
        )
        params += [now, StepStatus.PENDING]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount


class Step(models.Model):
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveIntegerField()
    # 0: the plan's own steps. n > 0: the steps of the workflow's n-th
    # compensation, run by the same engine in their own lane.
    lane = models.PositiveIntegerField(default=0)
    compensation_run = models.ForeignKey(
        "Compensation", on_delete=models.CASCADE, null=True, blank=True, related_name="steps"
    )
    compensates = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="compensated_by"
    )
    key = models.CharField(max_length=80)
    action = models.CharField(max_length=64)
    args = models.JSONField(default=dict)
    compensation = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=32, choices=StepStatus.choices, default=StepStatus.PENDING)
    operation_key = models.CharField(max_length=128, unique=True)
    result = models.JSONField(null=True, blank=True)
    external_ref = models.CharField(max_length=200, blank=True, default="")
    # Fencing number: bumped by every claim; a worker may record an outcome
    # only while the step still carries the number it claimed with.
    fence = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    failure_class = models.CharField(max_length=32, choices=FailureClass.choices, blank=True, default="")
    # Attempts numbered above this belong to the current run (a replay starts
    # a fresh attempt budget; numbering never restarts).
    retry_base = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)
    # The effect preview a worker took for the reviewer (`workflows.engine.previews`):
    # `{"summary", "details"}`, redacted, and the digest an approval binds.
    # Defaults in the database too: a process that predates previews still inserts steps.
    preview_state = models.CharField(
        max_length=16, choices=PreviewState.choices, default=PreviewState.NONE, db_default=PreviewState.NONE
    )
    preview = models.JSONField(null=True, blank=True)
    preview_digest = models.CharField(max_length=64, blank=True, default="", db_default="")
    preview_error = models.TextField(blank=True, default="", db_default="")
    preview_failure_class = models.CharField(
        max_length=32, choices=FailureClass.choices, blank=True, default="", db_default=""
    )
    preview_at = models.DateTimeField(null=True, blank=True)
    # The preview as approved, kept when the one taken again before the effect
    # differed from it (the step is then BLOCKED): reviewers see both.
    approved_preview = models.JSONField(null=True, blank=True)
    # A gate in the middle of the plan (DESIGN §22): `{"approvals": N,
    # "note": str}`. The run pauses before this step (WAITING_GATE) until N
    # reviewers approve it, seeing the results before it; `gate_opened_at`
    # is when they had.
    gate = models.JSONField(null=True, blank=True)
    gate_opened_at = models.DateTimeField(null=True, blank=True)
    # An operator's answer for this IN_DOUBT step that waits for a second
    # person (DESIGN §27, `workflows.operations.resolution`): `{"decision",
    # "reason", "external_ref", "result", "at"}`, and who gave it. Null
    # when none waits. Unindexed: nothing looks steps up by proposer, and
    # every step inserted would pay for the index.
    proposed_resolution = models.JSONField(null=True, blank=True)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )

    objects = StepQuerySet.as_manager()

    class Meta:
        ordering = ["workflow", "position"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "key"], name="step_key_unique"),
            models.UniqueConstraint(fields=["workflow", "position"], name="step_position_unique"),
        ]
        indexes = [
            # The claim walks this in order and stops at its batch: steps of
            # plans awaiting review (no next_attempt_at) are never visited.
            # The condition is one that the claim's `next_attempt_at <= now`
            # implies on both databases: SQLite cannot match a status list
            # bound as parameters against one in an index's condition, and
            # would scan every PENDING step instead.
            models.Index(
                fields=["next_attempt_at", "position", "id"],
                name="step_ready",
                condition=Q(next_attempt_at__isnull=False),
            ),
            models.Index(fields=["status", "lease_expires_at"], name="step_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.action} ({self.status})"

    def proposal_digest(self) -> str:
        """What a confirmation of the waiting answer binds: the answer, who
        gave it and when."""
        return sha256_hex(
            canonical_json({"step": self.operation_key, "by": self.proposed_by_id, **self.proposed_resolution})
        )


class Attempt(models.Model):
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=32, choices=AttemptStatus.choices, default=AttemptStatus.REQUESTED)
    operation_key = models.CharField(max_length=128)
    fence = models.PositiveIntegerField()
    failure_class = models.CharField(max_length=32, choices=FailureClass.choices, blank=True, default="")
    error = models.TextField(blank=True, default="")
    worker = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    # The plan hash this attempt ran under, recomputed from the stored steps
    # when it was requested (`workflows.engine.binding`); "" before binding existed.
    plan_hash = models.CharField(max_length=64, blank=True, default="")
    # The approval proof this attempt's writes carry (DESIGN §25): the key
    # id it is signed with, its unique id, and the approvals it names
    # (`[{"sub", "at"}]`). Not the token: it is rebuilt at each send.
    # Blank for in-process actions, which send nothing out.
    proof_kid = models.CharField(max_length=64, blank=True, default="", db_default="")
    proof_jti = models.CharField(max_length=64, blank=True, default="", db_default="")
    proof_approvers = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["step", "number"]
        constraints = [models.UniqueConstraint(fields=["step", "number"], name="attempt_number_unique")]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="attempt_lease"),
            # The dashboard's time windows, and the audit of an operation key.
            models.Index(fields=["finished_at"], name="attempt_finished"),
            models.Index(fields=["started_at"], name="attempt_started"),
            models.Index(fields=["operation_key"], name="attempt_operation_key"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.step_id} ({self.status})"

    @property
    def duration_ms(self) -> int | None:
        if not self.finished_at:
            return None
        return int((self.finished_at - self.started_at).total_seconds() * 1000)


class Approval(models.Model):
    class Decision(models.TextChoices):
        APPROVE = "APPROVE"
        REJECT = "REJECT"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=16, choices=Decision.choices)
    comment = models.TextField(blank=True, default="")
    plan_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    # HMAC-SHA256 under the audit key `key_id` over what was decided
    # (`workflows.engine.binding.seal`): an approval without a valid one never counts.
    mac = models.CharField(max_length=64, blank=True, default="")
    key_id = models.CharField(max_length=32, blank=True, default="")
    # `{step key: digest}` of the previews the reviewer was shown, sealed with
    # the rest; null (none shown) in rows written without it.
    preview_digests = models.JSONField(default=dict, blank=True, null=True)
    # The plan revision decided on, sealed with the rest: an approval of an
    # earlier revision never counts, even for a plan edited back to the same hash.
    revision = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["workflow", "created_at"], name="approval_workflow")]


class PlanRevision(models.Model):
    """One revision of a plan: the steps as they stood, who made them and
    why. Revision 1 (as submitted) is written when the plan is first edited;
    a plan never edited has no rows and its one revision is the workflow's."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    plan = models.JSONField()
    plan_hash = models.CharField(max_length=64)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    comment = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["number"]
        constraints = [models.UniqueConstraint(fields=["workflow", "number"], name="plan_revision_unique")]


class GateApproval(models.Model):
    """A reviewer's decision on a gate: sealed with the audit key over the
    plan, the gate's step and the digest of the results they were shown."""

    class Decision(models.TextChoices):
        APPROVE = "APPROVE"
        REJECT = "REJECT"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="gate_approvals")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="gate_approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=16, choices=Decision.choices)
    comment = models.TextField(blank=True, default="")
    plan_hash = models.CharField(max_length=64)
    results_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    mac = models.CharField(max_length=64, blank=True, default="")
    key_id = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["step", "reviewer"], name="gate_decision_once")]


class ReviewNotice(models.Model):
    """A reminder before a plan's review deadline, or the escalation once it
    passed: one row each, written with the plan, sent once by whichever
    cluster takes its row first (`operations.notifications.send_due`)."""

    class Kind(models.TextChoices):
        REMINDER = "REMINDER"
        ESCALATION = "ESCALATION"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="review_notices")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    due_at = models.DateTimeField()
    # The review deadline it is about, and (an escalation) the group told;
    # from the plan's `review`, else from its actions' policies.
    deadline = models.DateTimeField()
    group = models.CharField(max_length=150, blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    # What became of it: the number of people told, or why nobody was.
    outcome = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "kind", "due_at"], name="review_notice_once")]
        indexes = [models.Index(fields=["due_at"], condition=Q(sent_at__isnull=True), name="review_notice_due")]


class UsedReviewLink(models.Model):
    """A one-click review link that decided (`operations.links`): each
    link's nonce once, so a link decides at most once."""

    nonce = models.CharField(max_length=32, unique=True)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="+")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=16)
    used_at = models.DateTimeField(default=timezone.now)


class CompensationQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Those of the workflows of the user's teams; agents see none."""
        if teams.is_global(user):
            return self
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


class ActionPolicy(models.Model):
    """Current rules for one action. Every change bumps `version`; attempts
    record the version they ran under."""

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
    # own (DESIGN §22): a deadline (seconds from submission), a reminder so
    # many seconds before it, and the group told once it passes.
    review_deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    review_reminder_seconds = models.PositiveIntegerField(null=True, blank=True)
    escalation_group = models.CharField(max_length=150, null=True, blank=True)
    # The Django group whose members alone may approve (and gate-approve) a
    # plan using this action; "" lets any reviewer (DESIGN §23).
    reviewer_group = models.CharField(max_length=150, blank=True, default="", db_default="")
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
    another operator authorizes it (DESIGN §19). `base_version` is the policy
    version it was asked against: a request made stale by a later change is
    refused, never applied over it."""

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

    def visible_to(self, user):
        """Those of the workflows the user sees (`WorkflowQuerySet.visible_to`)."""
        if teams.is_global(user):
            return self
        if teams.is_staff_role(user):
            return self.filter(
                Q(workflow__team_id__in=teams.team_ids(user))
                | Q(workflow__submitted_by=user, **_token_team(user, "workflow__"))
            )
        return self.filter(workflow__submitted_by=user, **_token_team(user, "workflow__"))


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
            models.Index(fields=["status", "-created_at"], name="dead_letter_status"),
            models.Index(fields=["action", "failure_class"], name="dead_letter_filters"),
        ]

    def __str__(self) -> str:
        return f"dead letter {self.pk} ({self.step_key}, {self.failure_class}, {self.status})"


class JobQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Its creator's, and the people's of its team (the one team all its
        entries belong to; a job across teams has none); a global user sees
        every job."""
        if teams.is_global(user):
            return self
        if not teams.is_staff_role(user):
            return self.none()
        return self.filter(Q(created_by=user, **_token_team(user)) | Q(team_id__in=teams.team_ids(user)))


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


class AuditEventQuerySet(models.QuerySet):
    """Audit events and checkpoints: rows are added, never changed or removed."""

    def update(self, **kwargs):
        raise PermissionError(f"{self.model._meta.verbose_name_plural} are append-only")

    def delete(self):
        raise PermissionError(f"{self.model._meta.verbose_name_plural} are append-only")

    def visible_to(self, user):
        """Global auditors see every event; others only their teams': of
        their teams' workflows, jobs, webhook endpoints and members (their
        sign-ins, tokens, break-glass), and of the teams themselves. Of the
        events about no workflow, those that concern every team (action
        policies and throttles, the trail's own keys and checkpoints) are
        seen by all; those about another team's objects, or about what no
        single team owns (linked persons, archives), are not."""
        if teams.is_global(user):
            return self
        mine = teams.team_ids(user)
        endpoints = [str(pk) for pk in WebhookEndpoint.objects.visible_to(user).values_list("pk", flat=True)]
        jobs = [str(pk) for pk in Job.objects.visible_to(user).values_list("pk", flat=True)]
        members = (
            get_user_model()
            .objects.filter(teams.members_of_q(mine))
            .annotate(key=Cast("pk", output_field=models.CharField()))
            .values("key")
        )
        return self.filter(
            Q(workflow_id__in=Workflow.objects.visible_to(user).values("pk"))
            | (Q(workflow_id__isnull=True) & ~Q(object_type__in=TEAM_SCOPED_EVENTS))
            | Q(object_type="webhook_endpoint", object_id__in=endpoints)
            | Q(object_type="team", object_id__in=[str(pk) for pk in mine])
            | Q(object_type="job", object_id__in=jobs)
            | Q(object_type="user", workflow_id__isnull=True, object_id__in=members)
        )


# The kinds of object an event about no workflow may name that belong to a
# team, or to no single one (`AuditEventQuerySet.visible_to`).
TEAM_SCOPED_EVENTS = ("webhook_endpoint", "team", "job", "user", "person", "archive", "workflow")


class AuditEvent(models.Model):
    """Append-only and hash-chained per stream (a workflow, or `system`).

    `hash` = HMAC-SHA256 under the audit key `key_id` (`hash_alg`
    `hmac-sha256`), or plain SHA-256 for rows written before keyed audit
    (`sha256`), over the previous hash and this event's canonical fields, so
    changing or removing any row breaks every later link.
    """

    SHA256 = "sha256"
    HMAC_SHA256 = "hmac-sha256"

    stream = models.CharField(max_length=64)
    seq = models.PositiveBigIntegerField()
    at = models.DateTimeField()
    actor = models.CharField(max_length=150)
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    workflow_id = models.UUIDField(null=True, blank=True)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    hash_alg = models.CharField(max_length=16, choices=[(SHA256, SHA256), (HMAC_SHA256, HMAC_SHA256)])
    key_id = models.CharField(max_length=32, blank=True, default="")
    # Who was behind the actor (DESIGN §23), hashed with the event when set:
    # the identity provider's subject and issuer for an SSO user, the API
    # token's id (its public prefix) for an agent, and the client address.
    subject = models.CharField(max_length=255, blank=True, default="", db_default="")
    issuer = models.CharField(max_length=255, blank=True, default="", db_default="")
    token_id = models.CharField(max_length=16, blank=True, default="", db_default="")
    client_address = models.CharField(max_length=45, blank=True, default="", db_default="")

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["stream", "seq"], name="audit_stream_seq_unique")]
        indexes = [
            models.Index(fields=["workflow_id", "id"], name="audit_workflow"),
            models.Index(fields=["actor", "id"], name="audit_actor"),
            models.Index(fields=["verb", "id"], name="audit_verb"),
            models.Index(fields=["at"], name="audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.verb} {self.object_type}:{self.object_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit events are append-only")


class AuditHead(models.Model):
    """The last link of each audit stream; its row lock orders appends."""

    stream = models.CharField(max_length=64, primary_key=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)


class AuditCheckpoint(models.Model):
    """One signed checkpoint of the audit streams; see workflows.audit.checkpoints.

    `statement` is the zlib-compressed canonical JSON that `signature`
    (Ed25519, key `kid`) signs; `digest` is its SHA-256, which the next
    checkpoint names as `prev`. Append-only, like the events.
    """

    number = models.PositiveBigIntegerField(unique=True)
    at = models.DateTimeField()
    kid = models.CharField(max_length=64)
    prev = models.CharField(max_length=64, blank=True, default="")
    digest = models.CharField(max_length=64)
    statement = models.BinaryField()
    signature = models.CharField(max_length=128)
    total = models.PositiveBigIntegerField()
    streams = models.PositiveIntegerField()
    changed = models.PositiveIntegerField()

    objects = AuditEventQuerySet.as_manager()

    def __str__(self) -> str:
        return f"checkpoint {self.number} at {self.at:%Y-%m-%d %H:%M:%S} ({self.changed} of {self.streams} streams)"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("audit checkpoints are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit checkpoints are append-only")


class AuditCheckpointHead(models.Model):
    """Each stream's head as the latest checkpoint signed it: what lets the
    next checkpoint hold only the streams that changed. A cache, never
    trusted by verification (which folds the signed checkpoints)."""

    stream = models.CharField(max_length=64, primary_key=True)
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)


class AuditVerification(models.Model):
    """One check of the audit chain (`verify_audit` or the console's "Verify
    now"), kept so auditors can see when the chain was last proven intact."""

    MAX_PROBLEMS = 50

    at = models.DateTimeField(default=timezone.now)
    by = models.CharField(max_length=150)
    # "" is every stream; otherwise the streams checked, comma-separated.
    scope = models.TextField(blank=True, default="")
    ok = models.BooleanField()
    events = models.PositiveBigIntegerField()
    streams = models.PositiveIntegerField()
    problem_count = models.PositiveIntegerField()
    problems = models.JSONField(default=list)
    seconds = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["scope", "-id"], name="audit_verification_scope")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {'OK' if self.ok else 'BROKEN'} ({self.scope or 'all streams'})"


class TeamQuerySet(models.QuerySet):
    def visible_to(self, user):
        """The teams whose work `user` sees (every team for a global user)."""
        if teams.is_global(user):
            return self
        return self.filter(pk__in=teams.team_ids(user))


class Team(models.Model):
    """A group of people and agents that see and decide only their own work
    (DESIGN §23). Rows that existed before teams belong to `default`."""

    DEFAULT = teams.DEFAULT

    name = models.SlugField(max_length=64, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # How long the team's finished plans stay in the tables before
    # `manage.py archive` (without --older-than) moves them out; null: kept.
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    objects = TeamQuerySet.as_manager()

    def __str__(self) -> str:
        return self.name


class Archive(models.Model):
    """One run of `manage.py archive` (DESIGN §24): where its files went and
    the digest of its signed manifest, which the `audit.archived` events
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
            return self.filter(Q(team_id__in=teams.team_ids(user)) | Q(submitted_by=user, **_token_team(user)))
        return self.filter(submitted_by=user, **_token_team(user))


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


class ProviderIdentity(models.Model):
    """The account an identity provider's subject signs in as (DESIGN §23):
    found by (issuer, subject), never by a name or an email address another
    account could share."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True)  # the provider's groups at the last sign-in
    signed_in_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="provider_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class AccountLink(models.Model):
    """Accounts of one person, grouped for four-eyes only
    (docs/approval-guarantees.md): a link never gives sign-in, roles or
    teams. An account with no row is a person of its own."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="account_link"
    )
    person = models.UUIDField(db_index=True)
    via = models.CharField(max_length=32)  # "manual", "sso-email"
    linked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.user} is person {self.person}"


class AgentOwner(models.Model):
    """The person who answers for an agent's account: its plans count as
    theirs for four-eyes, and their removal at the provider stops its
    tokens."""

    agent = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="agent_owner"
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agents_owned")
    since = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.agent} owned by {self.owner}"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    # The agent's team: the plans it submits with this token are that team's.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="tokens", default=teams.default_team_id)
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Stopped (not revoked) while its agent's owner is signed out at the
    # provider; an operator re-enables it.
    suspended_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookSecret  # noqa: E402,F401
