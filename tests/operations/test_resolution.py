"""Operators settle in-doubt steps with evidence and a reason."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.resolving import MAIL
from tests.support.running import run_until
from workflows.engine import execution, recovery
from workflows.errors import DomainError, NotAllowed
from workflows.models import AuditEvent, Step
from workflows.operations import plans, resolution


@pytest.fixture
def in_doubt(people, settings, tmp_path):
    """An email whose worker died after the REQUESTED checkpoint: nobody knows if it went out."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)
    workflow = plans.submit(people["agent"], MAIL).workflow
    decide.approve(workflow, by=people["reviewer"])
    step = execution.claim(workflow.pk)
    execution._request_attempt(step, step.fence)
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    execution.run_workflow(workflow.pk)
    step.refresh_from_db()
    workflow.refresh_from_db()
    assert (step.status, workflow.status) == ("IN_DOUBT", "NEEDS_ATTENTION")
    assert list(tmp_path.iterdir()) == []  # and it was not sent blindly again
    return step


def test_it_happened_completes_the_step_with_the_evidence(in_doubt, people, tmp_path):
    resolution.resolve(
        in_doubt,
        by=people["operator"],
        decision="happened",
        reason="seen in the mail log",
        external_ref="smtp:250-queued-ab12",
    )
    run_until(in_doubt.workflow_id, "COMPLETE")
    in_doubt.refresh_from_db()
    assert (in_doubt.status, in_doubt.external_ref) == ("COMPLETE", "smtp:250-queued-ab12")
    assert list(tmp_path.iterdir()) == []  # not sent again
    event = AuditEvent.objects.get(verb="step.resolved")
    assert (event.actor, event.data["reason"], event.data["decision"]) == (
        "operator",
        "seen in the mail log",
        "happened",
    )


def test_it_did_not_happen_retries_with_the_same_operation_key(in_doubt, people, tmp_path):
    resolution.resolve(in_doubt, by=people["operator"], decision="not_happened", reason="not in the mail log")
    run_until(in_doubt.workflow_id, "COMPLETE")
    sent = list(tmp_path.iterdir())
    assert len(sent) == 1 and in_doubt.operation_key in sent[0].read_text()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"decision": "happened", "reason": ""}, DomainError),
        ({"decision": "happened", "reason": "trust me"}, DomainError),  # no evidence
        ({"decision": "maybe", "reason": "hmm"}, DomainError),
    ],
)
def test_resolution_needs_a_decision_a_reason_and_evidence(in_doubt, people, kwargs, error):
    with pytest.raises(error):
        resolution.resolve(in_doubt, by=people["operator"], **kwargs)
    in_doubt.refresh_from_db()
    assert in_doubt.status == "IN_DOUBT"


def test_only_operators_resolve(in_doubt, people):
    with pytest.raises(NotAllowed):
        resolution.resolve(in_doubt, by=people["reviewer"], decision="not_happened", reason="x")


def test_operators_resolve_from_the_workflow_page(in_doubt, client):
    assert client.login(username="operator", password=PASSWORD)
    page = client.get(f"/workflows/{in_doubt.workflow_id}/")
    assert b"Resolve in-doubt step" in page.content
    response = client.post(
        f"/workflows/{in_doubt.workflow_id}/steps/mail/resolve",
        {"decision": "not_happened", "reason": "checked the outbox"},
    )
    assert response.status_code == 302
    in_doubt.refresh_from_db()
    assert in_doubt.status == "PENDING"


def test_compensate_records_the_effect_stops_the_run_and_requests_an_undo(in_doubt, people, tmp_path):
    resolution.resolve(
        in_doubt,
        by=people["operator"],
        decision="compensate",
        reason="sent to the wrong list",
        external_ref="smtp:queued-77",
    )
    in_doubt.refresh_from_db()
    workflow = in_doubt.workflow
    workflow.refresh_from_db()
    assert (in_doubt.status, workflow.status) == ("COMPLETE", "FAILED")
    requested = workflow.compensations.get()
    assert (requested.status, requested.requested_by.username) == ("REQUESTED", "operator")
    assert [i["key"] for i in requested.irreversible] == ["mail"]  # an email cannot be unsent: said, not hidden
    assert Step.objects.get(workflow=workflow, key="after").status == "PENDING"  # the run stopped
