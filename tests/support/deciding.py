"""Decisions made in Python on what the plan shows now (`Seen.current`),
its previews taken first (`seeing.previews_taken`), for tests whose subject
is not what the decider saw."""

from __future__ import annotations

from dataclasses import replace

from tests.support import seeing
from workflows.operations import approvals, compensation, revisions
from workflows.operations import gates as gate_decisions
from workflows.operations.deciding import Seen


def approve(workflow, *, by, comment: str = "", preview_digests=None):
    if preview_digests is None:
        seeing.previews_taken(workflow.pk)
    seen = Seen.current(workflow)
    if preview_digests is not None:
        seen = replace(seen, preview_digests=preview_digests)
    return approvals.approve(workflow, by=by, seen=seen, comment=comment)


def reject(workflow, *, by, comment: str = ""):
    return approvals.reject(workflow, by=by, seen=Seen.current(workflow), comment=comment)


def gate_approve(workflow, step_key: str, *, by, comment: str = "", results_digest=None):
    seen = Seen.current(workflow, gate_step=step_key)
    if results_digest is not None:
        seen = replace(seen, results_digest=results_digest)
    return gate_decisions.approve(workflow, step_key, by=by, seen=seen, comment=comment)


def gate_reject(workflow, step_key: str, *, by, comment: str = ""):
    return gate_decisions.reject(
        workflow, step_key, by=by, seen=Seen.current(workflow, gate_step=step_key), comment=comment
    )


def authorize(comp, *, by, reason: str = ""):
    return compensation.authorize(comp, by=by, seen=Seen(plan_hash=compensation.current_hash(comp)), reason=reason)


def decline(comp, *, by, reason: str):
    return compensation.decline(comp, by=by, seen=Seen(plan_hash=compensation.current_hash(comp)), reason=reason)


def revise(workflow, *, by, steps, comment: str = ""):
    return revisions.revise(workflow, by=by, revision=Seen.current(workflow).revision, steps=steps, comment=comment)
