"""Dead letters: list, preview, replay and discard one, or reconcile and replay many in a bulk job."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictBool

from workflows import actions, ages, roles
from workflows.api import lookup
from workflows.api.schemas import ReasonIn
from workflows.engine import policy
from workflows.errors import DomainError
from workflows.models import DeadLetter
from workflows.operations import bulk, deadletters
from workflows.states import FailureClass
from workflows.web.pagination import page_by_created

router = Router()


class DeadLetterOut(Schema):
    id: UUID
    workflow_id: UUID
    step_key: str
    action: str
    failure_class: str
    attempt_count: int
    status: str
    trace_id: UUID
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resolution_reason: str


class DeadLetterPage(Schema):
    items: list[DeadLetterOut]
    next: str | None


class CheckOut(Schema):
    name: str
    ok: bool
    detail: str


class ReplayPreviewOut(Schema):
    dead_letter_id: UUID
    workflow_id: UUID
    step_key: str
    action: str
    operation_key: str
    args: dict[str, Any]
    checks: list[CheckOut]
    will_run: bool


def dead_letter_out(entry: DeadLetter) -> dict:
    return {
        "id": entry.pk,
        "workflow_id": entry.workflow_id,
        "step_key": entry.step_key,
        "action": entry.action,
        "failure_class": entry.failure_class,
        "attempt_count": entry.attempt_count,
        "status": entry.status,
        "trace_id": entry.trace_id,
        "created_at": entry.created_at,
        "resolved_at": entry.resolved_at,
        "resolved_by": entry.resolved_by.get_username() if entry.resolved_by else None,
        "resolution_reason": entry.resolution_reason,
    }


@router.get(
    "/dead-letters",
    response=DeadLetterPage,
    summary="List dead letters (operators, auditors; an agent, those of its own workflows)",
)
def list_dead_letters(
    request,
    workflow: UUID | None = None,
    status: DeadLetter.Status | None = None,
    action: str | None = None,
    failure_class: FailureClass | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
):
    lookup.reads(request, "dead_letters")
    entries = (
        DeadLetter.objects.visible_to(request.user)
        .select_related("resolved_by")
        .chosen(workflow=workflow, status=status, action=action, failure_class=failure_class)
    )
    rows, next_cursor = page_by_created(entries, cursor, limit)
    return {"items": [dead_letter_out(e) for e in rows], "next": next_cursor}


class DeadLetterFilterIn(Schema):
    """The GET list's query parameters, plus age, team, an explicit selection
    (`ids`) and the entries of an earlier bulk job (`job`). `status` may only
    say OPEN: nothing else is reconciled or replayed."""

    model_config = ConfigDict(extra="forbid")

    workflow: UUID | None = None
    status: DeadLetter.Status | None = None
    action: str | None = Field(None, min_length=1, max_length=64)
    failure_class: FailureClass | None = None
    older_than: str | None = Field(None, max_length=32, description="An age such as 30m, 12h or 90d")
    team: str | None = Field(None, min_length=1, max_length=64)
    ids: list[UUID] | None = Field(None, min_length=1, max_length=bulk.MAX_ITEMS)
    job: UUID | None = Field(None, description="The entries a bulk job of yours chose (still open)")

    def chosen(self) -> dict:
        """The selection, for `deadletters.matching`; a 400 when it chooses nothing or not OPEN."""
        if self.status not in (None, DeadLetter.Status.OPEN):
            raise DomainError(
                "Only open dead letters can be reconciled or replayed.",
                fields={"filter.status": "Only OPEN dead letters can be reconciled or replayed."},
            )
        older_than = None
        if self.older_than is not None:
            try:
                older_than = ages.parse_age(self.older_than)
            except ages.AgeInvalid as exc:
                raise ages.AgeInvalid(exc.message, fields={"filter.older_than": exc.message}) from None
        chosen = {
            "workflow": self.workflow,
            "action": self.action,
            "failure_class": self.failure_class,
            "older_than": older_than,
            "team": self.team,
            "ids": self.ids,
            "job": self.job,
        }
        if not any(chosen.values()):
            message = (
                "Choose dead letters by workflow, action, failure_class, older_than, team, ids or job: "
                "never all of them at once."
            )
            raise DomainError(message, fields={"filter": message})
        return chosen

    def shown(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)


class BulkReplayIn(Schema):
    model_config = ConfigDict(extra="forbid")

    filter: DeadLetterFilterIn = Field(
        ..., description="At least one of workflow, action, failure_class, older_than, team, ids, job"
    )
    only: Literal["safe", "all"] = Field(
        "safe",
        description="safe: reconcile each entry just before its replay "
        "(applied ones are settled, in-doubt ones left for a person); "
        "all: replay each",
    )
    dry_run: StrictBool = Field(..., description="true: say what would be replayed and change nothing")
    reason: str = Field("", description="Required unless dry_run")


class RefusalOut(Schema):
    id: UUID
    reason: str


class BulkReplayOut(Schema):
    dry_run: bool
    matched: int = Field(..., description="Open dead letters the filter chose")
    capped: bool = Field(
        ..., description=f"More match than one job takes ({bulk.MAX_ITEMS}): run it again for the rest"
    )
    job: UUID | None = Field(None, description="The replay job (GET /api/v1/jobs/{id}); null for a dry run")
    replayed: list[UUID] = Field([], description="Dry run: those that would be replayed")
    refused: list[RefusalOut] = Field([], description="Dry run: those current policy would refuse, and why")
    in_doubt: list[UUID] = Field([], description="Dry run, only=safe: no lookup and not idempotent, left alone")
    lookup_first: list[UUID] = Field([], description="Dry run, only=safe: looked up just before their replay")
    previews: list[ReplayPreviewOut] = Field(
        [], description=f"Dry run: exactly what each replay would run (the first {deadletters.MAX_BULK})"
    )


def _dry_replay(user, chosen: dict, only: str) -> dict:
    entries = list(deadletters.matching(user, **chosen).select_related("step")[: bulk.MAX_ITEMS + 1])
    found = {"dry_run": True, "matched": min(len(entries), bulk.MAX_ITEMS), "capped": len(entries) > bulk.MAX_ITEMS}
    entries = entries[: bulk.MAX_ITEMS]
    in_doubt, lookup_first = [], []
    if only == "safe":
        for entry in entries:
            action = actions.find(entry.action)
            sorted_ = bulk.sort_without_lookup(action, entry.step)
            if sorted_ is None:
                lookup_first.append(entry.pk)
            elif sorted_.state == bulk.State.IN_DOUBT:
                in_doubt.append(entry.pk)
    skipped = set(in_doubt)
    previews = deadletters.preview([entry for entry in entries if entry.pk not in skipped][: deadletters.MAX_BULK])
    return {
        **found,
        "in_doubt": in_doubt,
        "lookup_first": lookup_first,
        "replayed": [p.dead_letter.pk for p in previews if p.will_run],
        "refused": [
            {
                "id": p.dead_letter.pk,
                "reason": "Current policy does not allow this replay: " + "; ".join(policy.problems(p.checks)),
            }
            for p in previews
            if not p.will_run
        ],
        "previews": [p.as_dict() for p in previews],
    }


# Registered before /dead-letters/{id}, whose route would take "replay" for an id.
@router.post(
    "/dead-letters/replay",
    response={200: BulkReplayOut, 202: BulkReplayOut},
    summary="Replay the open dead letters a filter chooses (operators) in a job that workers advance in "
    "batches; dry_run answers what would be replayed (200), a replay answers 202 with its job",
)
def replay_dead_letters(request, payload: BulkReplayIn):
    lookup.require(request, roles.OPERATORS)
    chosen = payload.filter.chosen()
    if payload.dry_run:
        return Status(200, _dry_replay(request.user, chosen, payload.only))
    job, beyond = bulk.replay(
        request.user, chosen, shown_filter=payload.filter.shown(), only=payload.only, reason=payload.reason
    )
    return Status(202, {"dry_run": False, "matched": job.items.count(), "capped": bool(beyond), "job": job.pk})


class ReconcileIn(Schema):
    model_config = ConfigDict(extra="forbid")

    filter: DeadLetterFilterIn = Field(..., description="As for the bulk replay")
    dry_run: StrictBool = Field(..., description="true: sort and count, settle nothing")


class ReconcileOut(Schema):
    job: UUID = Field(
        ..., description="The reconciliation (GET /api/v1/jobs/{id}): its counts grow as workers look entries up"
    )
    dry_run: bool
    matched: int
    capped: bool
    applied: int = Field(..., description="Found by lookup (settled, unless dry run)")
    safe: int = Field(..., description="Not found by lookup, or idempotent: safe to replay")
    in_doubt: int = Field(..., description="No lookup and not idempotent: for a person")
    pending: int = Field(..., description="Still to be looked up by a worker")


@router.post(
    "/dead-letters/reconcile",
    response={202: ReconcileOut},
    summary="Sort the open dead letters a filter chooses into applied / safe / in doubt (operators); "
    "workers look them up and settle the applied ones (not in a dry run)",
)
def reconcile_dead_letters(request, payload: ReconcileIn):
    lookup.require(request, roles.OPERATORS)
    job, beyond = bulk.reconcile(
        request.user, payload.filter.chosen(), shown_filter=payload.filter.shown(), dry_run=payload.dry_run
    )
    counts = bulk.counts(job)
    return Status(
        202,
        {
            "job": job.pk,
            "dry_run": job.dry_run,
            "matched": counts["total"],
            "capped": bool(beyond),
            "applied": counts["applied"],
            "safe": counts["safe"],
            "in_doubt": counts["in_doubt"],
            "pending": counts["remaining"],
        },
    )


@router.get(
    "/dead-letters/{dead_letter_id}",
    response=DeadLetterOut,
    summary="One dead letter (operators, auditors; an agent, one of its own workflows)",
)
def get_dead_letter(request, dead_letter_id: UUID):
    return dead_letter_out(lookup.dead_letter(request, dead_letter_id))


@router.get(
    "/dead-letters/{dead_letter_id}/preview",
    response=ReplayPreviewOut,
    summary="Exactly what a replay would run, and the policy checks as they stand now",
)
def preview_dead_letter(request, dead_letter_id: UUID):
    entry = lookup.dead_letter(request, dead_letter_id)
    lookup.require(request, roles.OPERATORS, roles.AUDITORS)
    return deadletters.preview([entry])[0].as_dict()


@router.post(
    "/dead-letters/{dead_letter_id}/replay",
    response={202: DeadLetterOut},
    summary="Replay with the original operation key (operators)",
)
def replay_dead_letter(request, dead_letter_id: UUID, payload: ReasonIn):
    entry = lookup.dead_letter(request, dead_letter_id)
    lookup.require(request, roles.OPERATORS)
    entry = deadletters.replay(entry, by=request.user, reason=payload.reason)
    return Status(202, dead_letter_out(entry))


@router.post(
    "/dead-letters/{dead_letter_id}/discard",
    response=DeadLetterOut,
    summary="Close without running anything (operators); the step stays DEAD_LETTERED",
)
def discard_dead_letter(request, dead_letter_id: UUID, payload: ReasonIn):
    entry = lookup.dead_letter(request, dead_letter_id)
    lookup.require(request, roles.OPERATORS)
    return dead_letter_out(deadletters.discard(entry, by=request.user, reason=payload.reason))
