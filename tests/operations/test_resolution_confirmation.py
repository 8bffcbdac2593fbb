"""No single person completes a decision chain (docs/explanation/decisions.md#bound-decisions): an operator's
answer for an IN_DOUBT step whose result a later step reads by `$from`
takes effect only once a second person (reviewer or operator, not the one
who answered) confirms it; until then the step stays IN_DOUBT, the workflow
NEEDS_ATTENTION, and the later steps do not run. An answer no later step
reads takes effect at once."""

import time

import pytest
from django.contrib.auth.models import Group, User

from tests.support import deciding as decide
from tests.support.api import ApiClient
from tests.support.personas import PASSWORD
from tests.support.resolving import READ_BY_NEXT, READ_BY_NONE, SAW, in_doubt
from tests.support.running import run_until, wait_for_status
from tests.support.seeing import Client
from workflows import roles
from workflows.engine import execution, recovery
from workflows.errors import NotAllowed
from workflows.models import AuditEvent, Step, Workflow
from workflows.operations import resolution


@pytest.fixture(autouse=True)
def mail_to_files(settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)


@pytest.fixture
def operator2(people):
    user = User.objects.create_user("operator2", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    return user


def answered(people, body=READ_BY_NEXT, key="doubt", by="operator") -> Step:
    step = in_doubt(people, body, key)
    return resolution.resolve(step, by=people[by] if isinstance(by, str) else by, **SAW)


def _get(api, step):
    return api["auditor"].get(f"/workflows/{step.workflow_id}").json()


def _confirm_path(step):
    return f"/workflows/{step.workflow_id}/steps/{step.key}/resolve/confirm"


def _nothing_confirmed(step):
    fresh = Step.objects.get(pk=step.pk)
    assert (fresh.status, fresh.workflow.status) == ("IN_DOUBT", "NEEDS_ATTENTION")
    assert fresh.proposed_resolution is not None
    assert not AuditEvent.objects.filter(verb="step.resolution_confirmed").exists()


# --- the answer waits, and so does the run ------------------------------------------


def test_the_answer_waits_on_the_step_and_the_reading_step_does_not_run(people, api, tmp_path):
    step = answered(people)
    assert step.status == "IN_DOUBT" and step.proposed_by == people["operator"]
    body = _get(api, step)
    assert body["status"] == "NEEDS_ATTENTION"
    mail, record = body["steps"]
    assert mail["status"] == "IN_DOUBT" and mail["result"] is None
    assert {
        k: mail["resolution"][k] for k in ("by", "decision", "external_ref", "result", "awaiting_confirmation")
    } == {
        "by": "operator",
        "decision": "happened",
        "external_ref": "smtp:250-ab12",
        "result": {"subject": "s (seen in the relay)"},
        "awaiting_confirmation": True,
    }
    assert mail["resolution"]["digest"] == step.proposal_digest()
    event = AuditEvent.objects.get(verb="step.resolution_proposed")
    assert (event.actor, event.data["read_by"], event.data["awaiting_confirmation"]) == ("operator", ["record"], True)
    assert not AuditEvent.objects.filter(verb__in=["step.resolved", "attempt.resolved"]).exists()
    # The engine, driven as a worker drives it, has nothing to run.
    for _ in range(5):
        recovery.recover_expired_leases()
        execution.drain(budget_seconds=0.2)
    waiting = Step.objects.get(workflow=step.workflow, key="record")
    assert (waiting.status, waiting.next_attempt_at, waiting.attempts.count()) == ("PENDING", None, 0)
    assert record["resolution"] is None
    assert list(tmp_path.iterdir()) == []  # nor was the mail sent again


@pytest.mark.parametrize("confirmer", ["reviewer", "operator2"])
def test_a_second_person_confirms_and_the_run_goes_on_with_the_confirmed_value(people, api, operator2, confirmer):
    step = answered(people)
    client = ApiClient(operator2) if confirmer == "operator2" else api[confirmer]
    answer = client.post(
        _confirm_path(step), {"reason": "saw ab12 queued in the relay", "resolution_digest": step.proposal_digest()}
    )
    assert answer.status_code == 200, answer.text
    mail = answer.json()["steps"][0]
    assert (mail["status"], mail["result"], mail["resolution"]) == ("COMPLETE", SAW["result"], None)
    assert answer.json()["status"] == "RUNNING"
    run_until(step.workflow_id, "COMPLETE")
    assert Step.objects.get(workflow=step.workflow, key="record").result == {"subject": "s (seen in the relay)"}
    event = AuditEvent.objects.get(verb="step.resolution_confirmed")
    assert (event.actor, event.data["resolved_by"], event.data["confirmation_reason"]) == (
        confirmer,
        "operator",
        "saw ab12 queued in the relay",
    )
    assert Step.objects.get(pk=step.pk).proposed_resolution is None


def test_the_one_who_answered_cannot_confirm(people, api, client):
    step = answered(people)
    with pytest.raises(NotAllowed):
        resolution.confirm(step, by=people["operator"], reason="me again", digest=step.proposal_digest())
    answer = api["operator"].post(
        _confirm_path(step), {"reason": "me again", "resolution_digest": step.proposal_digest()}
    )
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert client.login(username="operator", password=PASSWORD)
    page = client.post(_confirm_path(step), {"reason": "me again", "resolution_digest": step.proposal_digest()})
    assert page.status_code == 403
    _nothing_confirmed(step)


@pytest.mark.parametrize("persona", ["auditor", "agent"])
def test_only_reviewers_and_operators_confirm(people, api, persona):
    step = answered(people)
    answer = api[persona].post(_confirm_path(step), {"reason": "r", "resolution_digest": step.proposal_digest()})
    assert answer.status_code == 403
    _nothing_confirmed(step)


def test_a_confirmation_of_an_answer_since_replaced_is_refused(people, api, operator2):
    step = answered(people)
    seen = step.proposal_digest()
    replaced = resolution.resolve(step, by=operator2, **{**SAW, "result": {"subject": "s (as resent)"}})
    assert replaced.proposed_by == operator2
    answer = api["reviewer"].post(_confirm_path(step), {"reason": "r", "resolution_digest": seen})
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "resolution_changed"
    _nothing_confirmed(step)
    # The first operator may confirm the second's answer: two people said it.
    assert (
        api["operator"]
        .post(_confirm_path(step), {"reason": "r", "resolution_digest": replaced.proposal_digest()})
        .status_code
        == 200
    )
    run_until(step.workflow_id, "COMPLETE")
    assert Step.objects.get(workflow=step.workflow, key="record").result == {"subject": "s (as resent)"}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"resolution_digest": "current"}, "reason"),
        ({"reason": " ", "resolution_digest": "current"}, "reason"),
        ({"reason": "r"}, "resolution_digest"),
        ({"reason": "r", "resolution_digest": "current", "extra": 1}, "extra"),
    ],
)
def test_a_bad_confirmation_is_refused_with_its_field(people, api, body, field):
    step = answered(people)
    if "resolution_digest" in body:
        body = {**body, "resolution_digest": step.proposal_digest()}
    answer = api["reviewer"].post(_confirm_path(step), body)
    assert answer.status_code == 400 and field in answer.json()["error"]["fields"], answer.text
    _nothing_confirmed(step)


def test_confirming_when_nothing_waits_is_a_conflict(people, api):
    step = in_doubt(people, READ_BY_NEXT)
    answer = api["reviewer"].post(_confirm_path(step), {"reason": "r", "resolution_digest": "0" * 64})
    assert answer.status_code == 409
    assert Step.objects.get(pk=step.pk).status == "IN_DOUBT"


# --- what takes effect at once ------------------------------------------------------


def test_a_result_no_later_step_reads_takes_effect_at_once(people, api):
    step = answered(people, READ_BY_NONE)
    assert (step.status, step.result, step.proposed_resolution) == ("COMPLETE", SAW["result"], None)
    assert _get(api, step)["status"] == "RUNNING"
    assert AuditEvent.objects.filter(verb="step.resolved", actor="operator").exists()
    assert not AuditEvent.objects.filter(verb="step.resolution_proposed").exists()
    run_until(step.workflow_id, "COMPLETE")


def test_it_did_not_happen_takes_effect_at_once_and_drops_a_waiting_answer(people, operator2, tmp_path):
    step = answered(people)
    again = resolution.resolve(step, by=operator2, decision="not_happened", reason="not in the relay after all")
    assert (again.status, again.proposed_resolution, again.proposed_by) == ("PENDING", None, None)
    run_until(step.workflow_id, "COMPLETE")
    sent = list(tmp_path.iterdir())
    assert len(sent) == 1 and step.operation_key in sent[0].read_text()
    assert Step.objects.get(workflow=step.workflow, key="record").result == {"subject": "s"}  # what was sent


# --- the workflow page --------------------------------------------------------------


def _page(people, name, step):
    client = Client()
    client.force_login(people[name] if isinstance(name, str) else name)
    from workflows.web.auth import SIGNED_IN_AT

    session = client.session
    session[SIGNED_IN_AT] = int(time.time())
    session.save()
    return client, client.get(f"/workflows/{step.workflow_id}/").content.decode()


def test_the_workflow_page_shows_the_waiting_answer_and_offers_others_to_confirm(people):
    step = answered(people)
    _, own = _page(people, "operator", step)
    assert 'data-testid="pending-resolution-mail"' in own and "A second person confirms it, not you." in own
    assert "Confirm the resolution" not in own
    _, auditor = _page(people, "auditor", step)
    assert "Awaiting confirmation" in auditor and "Confirm the resolution" not in auditor
    client, reviewer = _page(people, "reviewer", step)
    assert "Confirm the resolution" in reviewer and step.proposal_digest() in reviewer
    assert "s (seen in the relay)" in reviewer
    answer = client.post(
        _confirm_path(step), {"reason": "checked the relay", "resolution_digest": step.proposal_digest()}
    )
    assert answer.status_code == 302
    assert Step.objects.get(pk=step.pk).status == "COMPLETE"
    assert "Confirmed the resolution of step mail" in client.get(answer["Location"]).content.decode()


def test_the_attention_page_shows_which_in_doubt_steps_wait_for_a_confirmation(people, operator2):
    waiting, other = answered(people, key="waits"), in_doubt(people, READ_BY_NEXT, key="open")
    client = Client()
    client.force_login(operator2)
    page = client.get("/attention/").content.decode()
    assert page.count('data-testid="awaiting-confirmation"') == 1
    assert "operator's answer awaits a second person's confirmation" in page
    assert Step.objects.get(pk=other.pk).status == waiting.status == "IN_DOUBT"


def test_resolving_from_the_page_says_the_answer_waits_for_a_second_person(people, client):
    step = in_doubt(people, READ_BY_NEXT)
    assert client.login(username="operator", password=PASSWORD)
    answer = client.post(
        f"/workflows/{step.workflow_id}/steps/mail/resolve",
        {"decision": "happened", "external_ref": "smtp:250", "reason": "in the mail log"},
    )
    page = client.get(answer["Location"]).content.decode()
    assert "takes effect once a second person confirms it" in page
    fresh = Step.objects.get(pk=step.pk)
    assert (fresh.status, fresh.proposed_resolution["result"]) == ("IN_DOUBT", {"external_ref": "smtp:250"})


# --- a real worker ------------------------------------------------------------------


def test_a_real_worker_runs_the_reading_step_only_after_the_confirmation(people, api, desk, start_worker):
    """The desk takes the ticket and drops the answer: the webhook's outcome
    is unknown, so it waits IN_DOUBT. The operator finds the ticket and gives
    its id; the comment that reads it waits for a second person."""
    desk.fault(mode="commit_then_drop", count=1)
    body = {
        "name": "hook, then comment",
        "submission_key": "hook",
        "steps": [
            {
                "key": "hook",
                "action": "http.post",
                "args": {"url": f"{desk.url}/tickets", "json": {"title": "via hook"}},
            },
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "hook.result.id"}, "body": "seen by the hook"},
            },
        ],
    }
    workflow_id = api["agent"].post("/workflows", body).json()["id"]
    start_worker()
    decide.approve(Workflow.objects.get(pk=workflow_id), by=people["reviewer"])
    wait_for_status(workflow_id, "NEEDS_ATTENTION")
    assert desk.faults() == []  # the fault was used
    [ticket] = desk.tickets()
    answer = api["operator"].post(
        f"/workflows/{workflow_id}/steps/hook/resolve",
        {
            "decision": "happened",
            "external_ref": f"desk:{ticket['id']}",
            "result": {"id": ticket["id"]},
            "reason": "the ticket is on the desk",
        },
    )
    assert answer.status_code == 200 and answer.json()["status"] == "NEEDS_ATTENTION"
    digest = answer.json()["steps"][0]["resolution"]["digest"]

    # The worker is at work meanwhile: another plan runs to the end.
    other = (
        api["agent"]
        .post(
            "/workflows",
            {
                "name": "meanwhile",
                "submission_key": "meanwhile",
                "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "meanwhile", "body": "b"}}],
            },
        )
        .json()["id"]
    )
    decide.approve(Workflow.objects.get(pk=other), by=people["reviewer"])
    wait_for_status(other, "COMPLETE")
    time.sleep(1)
    note = Step.objects.get(workflow_id=workflow_id, key="note")
    assert (note.status, note.attempts.count()) == ("PENDING", 0)
    assert desk.ticket(ticket["id"])["comments"] == []

    confirmed = api["reviewer"].post(
        f"/workflows/{workflow_id}/steps/hook/resolve/confirm",
        {"reason": "the desk shows it", "resolution_digest": digest},
    )
    assert confirmed.status_code == 200, confirmed.text
    wait_for_status(workflow_id, "COMPLETE")
    assert [c["body"] for c in desk.ticket(ticket["id"])["comments"]] == ["seen by the hook"]
