"""Proposing a team's Cedar policy set and making it live, as its people do over the API."""

from workflows.engine import execution
from workflows.models import AuditEvent, Step


def propose(api, text, team="default", who="operator"):
    return api[who].post(f"/policy-sets/{team}/versions", {"text": text})


def make_live(api, text, team="default"):
    answer = propose(api, text, team)
    assert answer.status_code == 202, answer.content
    change = answer.json()["id"]
    decided = api["reviewer"].post(f"/policy-changes/{change}/authorize", {"reason": ""})
    assert decided.status_code == 200, decided.content
    return answer.json()


def problems(workflow_id) -> str:
    """What the recheck found, as the audit keeps it with the block."""
    event = AuditEvent.objects.filter(workflow_id=workflow_id, verb="step.blocked").latest("id")
    return " ".join(event.data["problems"])


def run_one(workflow_id):
    """The workflow's next step, claimed and run here (the recheck, then its effect)."""
    step = execution.claim(workflow_id)
    assert step is not None
    execution.run_batch([step])
    return Step.objects.get(pk=step.pk)
