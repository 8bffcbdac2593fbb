"""The bulk reconcile and replay jobs of dead letters: progress, pause, resume."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Field, Router, Schema

from workflows import roles
from workflows.api import lookup
from workflows.models import Job
from workflows.operations import bulk

router = Router()


class JobSampleOut(Schema):
    dead_letter_id: UUID
    workflow_id: UUID
    step_key: str
    action: str
    operation_key: str
    detail: str


class JobOut(Schema):
    id: UUID
    kind: Literal["reconcile", "replay"]
    status: Literal["RUNNING", "PAUSED", "DONE"]
    dry_run: bool
    only: Literal["safe", "all"] | None
    filter: dict[str, Any]
    created_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    total: int
    done: int
    failed: int
    remaining: int
    applied: int
    safe: int
    in_doubt: int
    replayed: int
    samples: dict[str, list[JobSampleOut]] = Field(
        ..., description="A few entries of each group: applied, safe, in_doubt, replayed, failed"
    )


def job_out(job: Job) -> dict:
    return {
        "id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "dry_run": job.dry_run,
        "only": job.only if job.kind == Job.Kind.REPLAY else None,
        "filter": job.filter,
        "created_by": job.created_by.get_username(),
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "finished_at": job.finished_at,
        **bulk.counts(job),
        "samples": bulk.samples(job),
    }


@router.get("/jobs/{job_id}", response=JobOut, summary="A bulk reconcile or replay and its progress (its operator)")
def get_job(request, job_id: UUID):
    return job_out(lookup.job(request, job_id))


@router.post("/jobs/{job_id}/pause", response=JobOut, summary="Pause a running bulk job (operators); 409 otherwise")
def pause_job(request, job_id: UUID):
    job = lookup.job(request, job_id)
    lookup.require(request, roles.OPERATORS)
    return job_out(bulk.pause(job, by=request.user))


@router.post("/jobs/{job_id}/resume", response=JobOut, summary="Resume a paused bulk job (operators); 409 otherwise")
def resume_job(request, job_id: UUID):
    job = lookup.job(request, job_id)
    lookup.require(request, roles.OPERATORS)
    return job_out(bulk.resume(job, by=request.user))
