"""The plans and their runs: workflows, their steps, each step's attempts
and the plan's revisions."""

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, models
from django.db.models import Q
from django.utils import timezone

from workflows import teams
from workflows.db import canonical_json, sha256_hex
from workflows.errors import NotVisible
from workflows.states import TERMINAL_WORKFLOW, AttemptStatus, FailureClass, PreviewState, StepStatus, WorkflowStatus


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
        (docs/explanation/decisions.md#bound-decisions: a token's team scopes its reads)."""
        if teams.is_global(user):
            return self
        if teams.is_staff_role(user):
            return self.filter(Q(team_id__in=teams.team_ids(user)) | Q(submitted_by=user, **teams.token_team(user)))
        return self.filter(submitted_by=user, **teams.token_team(user))


class Workflow(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # The team of the token that submitted it: only that team's people see,
    # decide and replay it (docs/explanation/teams.md#teams).
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
    # passes (docs/explanation/review.md#review), as the plan set it: `{"deadline_seconds",
    # "remind_before_seconds": [...], "escalate_to": group}`; null for none
    # (its actions' policies may still set one: `ReviewNotice`).
    review = models.JSONField(null=True, blank=True)
    # When the plan's deadline passed and, its review saying `"on_expiry":
    # "escalate"`, it went to `review.escalate_to` with its deadline extended
    # instead of expiring (`engine.expiry`): set once, by a conditional update.
    escalated_at = models.DateTimeField(null=True, blank=True)
    # The plan's revision: 1 as submitted, one more for each reviewer's edit
    # (`operations.revisions`); an approval counts only for its revision.
    revision = models.PositiveIntegerField(default=1, db_default=1)
    # What the team's Cedar policies asked of the people who approve this
    # plan, as found when it was submitted or last revised
    # (docs/explanation/policies.md#annotations): `{"approvals": N | null,
    # "groups": [...], "policies": [@id, ...], "steps": [key, ...]}`; null
    # when they asked nothing. It raises its actions' policies: the approvals
    # needed are the larger, and approvers must be in every group.
    policy_asks = models.JSONField(null=True, blank=True)
    # The W3C `traceparent` of the request that last woke the plan's steps
    # (`queue.wake`, written only while tracing is on): a step claimed by a
    # drain that did not carry that wake-up still continues its trace
    # (docs/deploying.md#tracing-and-logs). Ids only, never a value of the plan.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")
    # Set when `manage.py restore` brought the plan back from its archive
    # (docs/explanation/operations-at-scale.md#operations-at-scale): it is shown, never changed again (a trigger refuses
    # every UPDATE of the row; `transitions.move` says why first).
    restored_at = models.DateTimeField(null=True, blank=True)
    # When a worker is to take the plan's pending previews
    # (`engine.previews.compute_due`): set with the steps whose previews are
    # pending, moved ahead while a worker takes them (a claim that a worker
    # killed mid-read lets lapse), cleared once they are stored or the plan
    # has ended. Null when there is nothing to take.
    previews_due_at = models.DateTimeField(null=True, blank=True)

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["submitted_by", "submission_key"], name="workflow_submission_unique"),
        ]
        indexes = [
            # Lists are newest first by (created_at, id), both descending
            # (`pagination.page_by_created`): each index below is walked in
            # that order and stopped at the page, whatever the planner's
            # statistics, for every reader's filter: everyone's, a status's,
            # a team's, and a submitter's own (an agent's).
            models.Index(fields=["status", "-created_at", "-id"], name="workflow_status_created"),
            models.Index(fields=["-created_at", "-id"], name="workflow_created"),
            models.Index(fields=["team", "-created_at", "-id"], name="workflow_team_created"),
            models.Index(fields=["submitted_by", "-created_at", "-id"], name="workflow_submitter_created"),
            # Previews to take, oldest first: only plans with some are in it.
            models.Index(
                fields=["previews_due_at"], name="workflow_previews_due", condition=Q(previews_due_at__isnull=False)
            ),
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
            getattr(self, name) == value for name, value in teams.token_team(user).items()
        )

    def require_visible_to(self, user) -> None:
        """404 (as if it did not exist) for a user outside its team."""
        if not self.is_visible_to(user):
            raise NotVisible("No such workflow.")

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_WORKFLOW

    def claim(self, now=None):
        """(reviewer, lapses at) of the claim on this plan while it awaits a
        decision, or None (unclaimed, lapsed, or decided): `operations.claims`."""
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
    # A gate in the middle of the plan (docs/explanation/review.md#review): `{"approvals": N,
    # "note": str}`. The run pauses before this step (WAITING_GATE) until N
    # reviewers approve it, seeing the results before it; `gate_opened_at`
    # is when they had.
    gate = models.JSONField(null=True, blank=True)
    gate_opened_at = models.DateTimeField(null=True, blank=True)
    # Typed decisions (docs/explanation/review.md#typed-decisions): at a gate
    # with `options` or an `input_schema`, the choice and input its approvers
    # agreed on, `{"choice", "input"}`, kept when it opened. `when`: `{"gate":
    # key, "choice": option}`, this step runs only on that choice, else SKIPPED.
    gate_decision = models.JSONField(null=True, blank=True)
    when = models.JSONField(null=True, blank=True)
    # What the team's Cedar policies found for this step when its plan was
    # submitted (docs/explanation/policies.md#approval-by-policy): `{"by":
    # "policy"|"human", "decision", "reason", "policies", "version",
    # "approvals", "group", "basis"}`, shown as decided then, never judged
    # again at view time. Null for steps submitted before it was kept.
    policy_decision = models.JSONField(null=True, blank=True)
    # An operator's answer for this IN_DOUBT step that waits for a second
    # person (docs/explanation/decisions.md#bound-decisions, `workflows.operations.resolution`): `{"decision",
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
    # The approval proof this attempt's writes carry (docs/explanation/approval-proofs.md#approval-proof): the key
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
