"""Fetch an object for the caller: their role allows it and it is visible
to them, or a 403 or 404 (a 410 for an archived workflow)."""

from uuid import UUID

from django.http import Http404

from workflows import roles
from workflows.errors import Archived, NotAllowed
from workflows.models import ArchivedWorkflow, Compensation, DeadLetter, PolicyChange, Workflow
from workflows.webhooks.models import WebhookEndpoint


def require(request, *allowed) -> None:
    if not any(roles.has_role(request.user, role) for role in allowed):
        raise NotAllowed("Your role does not allow this.")


def visible_workflows(user):
    return (
        Workflow.objects.visible_to(user)
        .select_related("submitted_by", "claimed_by", "team")
        .prefetch_related("steps__attempts", "steps__compensates", "revisions__by")
    )


def workflow(request, workflow_id: UUID) -> Workflow:
    found = visible_workflows(request.user).filter(pk=workflow_id).first()
    if found is None:
        archived = ArchivedWorkflow.objects.visible_to(request.user).filter(workflow_id=workflow_id).first()
        if archived is not None:  # moved out by `manage.py archive` (DESIGN §24)
            raise Archived(f"Workflow {workflow_id} was archived on {archived.archived_at:%Y-%m-%d}.")
        raise Http404
    return found


def gate_step(workflow: Workflow, step_key: str):
    if not workflow.steps.filter(key=step_key, lane=0).exists():
        raise Http404
    return step_key


def visible_dead_letters(user):
    """Operators and auditors see the dead letters of their teams; an agent
    (a user in no role) those of its own workflows. Reviewers have none to see."""
    if not (roles.is_operator(user) or roles.is_auditor(user)) and any(
        roles.has_role(user, role) for role in roles.ALL
    ):
        raise NotAllowed("Your role does not allow this.")
    return DeadLetter.objects.visible_to(user)


def dead_letter(request, dead_letter_id: UUID) -> DeadLetter:
    entry = visible_dead_letters(request.user).select_related("resolved_by").filter(pk=dead_letter_id).first()
    if entry is None:
        raise Http404
    return entry


def compensation(request, compensation_id: UUID) -> Compensation:
    require(request, roles.OPERATORS, roles.REVIEWERS, roles.AUDITORS)
    comp = (
        Compensation.objects.visible_to(request.user)
        .select_related("workflow", "requested_by", "authorized_by")
        .filter(pk=compensation_id)
        .first()
    )
    if comp is None:
        raise Http404
    return comp


def policy_change(request, change_id: UUID) -> PolicyChange:
    require(request, roles.OPERATORS, roles.AUDITORS)
    found = PolicyChange.objects.select_related("requested_by", "decided_by").filter(pk=change_id).first()
    if found is None:
        raise Http404
    return found


def webhook_endpoint(request, endpoint_id: UUID) -> WebhookEndpoint:
    require(request, roles.OPERATORS, roles.AUDITORS)
    endpoint = (
        WebhookEndpoint.objects.visible_to(request.user)
        .select_related("created_by", "team")
        .filter(pk=endpoint_id)
        .first()
    )
    if endpoint is None:
        raise Http404
    return endpoint
