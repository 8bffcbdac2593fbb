"""Fetch an object for the caller through its `visible_to(user)`: what it
holds, else a 404 (a 410 for an archived workflow they saw): another
team's, someone else's. A 403 answers a kind their role does not read
(`reads`, before any lookup, on lists and details alike) and an action
their role may not take on an object they see (`require`)."""

from uuid import UUID

from django.db.models import prefetch_related_objects
from django.http import Http404

from workflows import roles
from workflows.audit import archived
from workflows.errors import Archived, NotAllowed
from workflows.models import Compensation, DeadLetter, Job, PolicyChange, Workflow
from workflows.operations import bulk
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint


def require(request, *allowed) -> None:
    if not any(roles.has_role(request.user, role) for role in allowed):
        raise NotAllowed("Your role does not allow this.")


def reads(request, kind: str) -> None:
    """403 for a role that reads none of this kind (`roles.may_read`)."""
    if not roles.may_read(request.user, kind):
        raise NotAllowed("Your role does not read these.")


def visible_workflows(user):
    return _with_steps(Workflow.objects.visible_to(user)).prefetch_related("revisions__by")


def _with_steps(workflows):
    return workflows.select_related("submitted_by", "claimed_by", "team").prefetch_related(
        "steps__attempts", "steps__compensates"
    )


def workflow(request, workflow_id: UUID) -> Workflow:
    found = _with_steps(Workflow.objects.visible_to(request.user)).filter(pk=workflow_id).first()
    if found is None:
        record = archived.archived_record(request.user, workflow_id)
        if record is not None:  # moved out by `manage.py archive`
            # (docs/explanation/operations-at-scale.md#operations-at-scale): as the console says
            raise Archived(archived.describe(record))
        raise Http404
    if found.revision > 1:  # a plan never edited has no revisions to read (`shapes`)
        prefetch_related_objects([found], "revisions__by")
    return found


def gate_step(workflow: Workflow, step_key: str):
    if not workflow.steps.filter(key=step_key, lane=0).exists():
        raise Http404
    return step_key


def job(request, job_id: UUID) -> Job:
    reads(request, "jobs")
    return bulk.get_for_user(request.user, job_id)


def dead_letter(request, dead_letter_id: UUID) -> DeadLetter:
    reads(request, "dead_letters")
    entry = DeadLetter.objects.visible_to(request.user).select_related("resolved_by").filter(pk=dead_letter_id).first()
    if entry is None:
        raise Http404
    return entry


def compensation(request, compensation_id: UUID) -> Compensation:
    reads(request, "compensations")
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
    # Reviewers read the proposed versions of their teams' policy sets, and
    # are answered as other roles that do not read action policies.
    if (
        not roles.is_reviewer(request.user)
        or PolicyChange.objects.filter(pk=change_id, policy_set_version__isnull=True).exists()
    ):
        reads(request, "policies")
    found = (
        PolicyChange.objects.visible_to(request.user)
        .select_related("requested_by", "decided_by", "policy_set_version__policy_set")
        .filter(pk=change_id)
        .first()
    )
    if found is None:
        raise Http404
    return found


def webhook_endpoint(request, endpoint_id: UUID) -> WebhookEndpoint:
    reads(request, "webhooks")
    endpoint = (
        WebhookEndpoint.objects.visible_to(request.user)
        .select_related("created_by", "team")
        .filter(pk=endpoint_id)
        .first()
    )
    if endpoint is None:
        raise Http404
    return endpoint


def webhook_delivery(request, delivery_id: UUID) -> WebhookDelivery:
    reads(request, "webhooks")
    row = WebhookDelivery.objects.visible_to(request.user).select_related("endpoint").filter(pk=delivery_id).first()
    if row is None:
        raise Http404
    return row
