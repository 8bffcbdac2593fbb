"""Dead letters over the API and the command line; replay happens once."""

import threading

import pytest
from django.core.management import CommandError, call_command

from tests.support.api import HttpApi
from tests.support.deadletters import dead_letter
from workflows.models import AuditEvent, DeadLetter, Step


def test_list_has_the_contract_shape_and_filters(people, desk, api):
    entry = dead_letter(people)
    page = api["operator"].get("/dead-letters", status="OPEN").json()
    item = page["items"][0]
    assert {"id", "workflow_id", "step_key", "action", "failure_class", "attempt_count", "status", "trace_id"} <= set(
        item
    )
    assert item["id"] == str(entry.pk) and item["trace_id"] == str(entry.trace_id)
    assert item["failure_class"] == "INVALID_ARGUMENTS" and item["attempt_count"] == 1
    assert api["auditor"].get("/dead-letters", workflow=str(entry.workflow_id)).json()["items"][0]["id"] == item["id"]
    assert api["operator"].get("/dead-letters", status="REPLAYED").json()["items"] == []
    assert api["operator"].get("/dead-letters", status="NOPE").status_code == 400


@pytest.mark.parametrize("persona", ["reviewer", "agent"])
def test_others_cannot_replay_dead_letters_and_reviewers_cannot_see_them(people, desk, api, persona):
    entry = dead_letter(people)
    # The agent submitted this workflow: it may see its dead letter, never
    # replay it (403); a reviewer's role reads no dead letters (403 for the
    # list, the entry and a replay).
    answer = api[persona].get("/dead-letters")
    if persona == "reviewer":
        assert answer.status_code == 403
        assert api[persona].get(f"/dead-letters/{entry.pk}").status_code == 403
    else:
        assert [item["id"] for item in answer.json()["items"]] == [str(entry.pk)]
    assert api[persona].post(f"/dead-letters/{entry.pk}/replay", {"reason": "x"}).status_code == 403


def test_auditors_read_but_do_not_replay(people, desk, api):
    entry = dead_letter(people)
    assert api["auditor"].get(f"/dead-letters/{entry.pk}").status_code == 200
    assert api["auditor"].post(f"/dead-letters/{entry.pk}/replay", {"reason": "x"}).status_code == 403
    entry.refresh_from_db()
    assert entry.status == "OPEN"


def test_replay_needs_a_reason(people, desk, api):
    entry = dead_letter(people)
    missing = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {})
    blank = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {"reason": "  "})
    assert missing.status_code == 400 and "reason" in missing.json()["error"]["fields"]
    assert blank.status_code == 400
    entry.refresh_from_db()
    assert entry.status == "OPEN" and Step.objects.get(pk=entry.step_id).status == "DEAD_LETTERED"


def test_replay_records_actor_and_reason_and_keeps_the_operation_key(people, desk, api):
    entry = dead_letter(people)
    step = Step.objects.get(pk=entry.step_id)
    response = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {"reason": "ticket restored"})
    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["resolved_by"], body["resolution_reason"]) == (
        "REPLAYED",
        "operator",
        "ticket restored",
    )
    event = AuditEvent.objects.get(verb="step.replayed")
    assert event.actor == "operator"
    assert event.data["reason"] == "ticket restored"
    assert event.data["operation_key"] == step.operation_key
    again = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {"reason": "again"})
    assert again.status_code == 409


def test_discard_closes_without_running(people, desk, api):
    entry = dead_letter(people)
    response = api["operator"].post(f"/dead-letters/{entry.pk}/discard", {"reason": "obsolete"})
    assert response.json()["status"] == "DISCARDED"
    assert Step.objects.get(pk=entry.step_id).status == "DEAD_LETTERED"


@pytest.mark.django_db(transaction=True)
def test_two_operators_replaying_at_once_cause_one_replay(live_server, desk):
    from django.contrib.auth.models import Group, User

    users = {}
    for name in ("agent", "reviewer", "operator", "operator2"):
        users[name] = User.objects.create_user(name, password="x")
    users["reviewer"].groups.add(Group.objects.get_or_create(name="reviewers")[0])
    for name in ("operator", "operator2"):
        users[name].groups.add(Group.objects.get_or_create(name="operators")[0])
    entry = dead_letter(users)
    clients = [HttpApi(live_server.url, users[name]) for name in ("operator", "operator2")]
    barrier = threading.Barrier(2)
    answers = []

    def replay(client):
        barrier.wait()
        answers.append(client.post(f"/dead-letters/{entry.pk}/replay", {"reason": "at once"}).status_code)

    threads = [threading.Thread(target=replay, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [202, 409]
    assert AuditEvent.objects.filter(verb="step.replayed").count() == 1


def test_command_previews_and_replays_a_filter(people, desk, capsys):
    first, second = dead_letter(people, "a"), dead_letter(people, "b")
    with pytest.raises(CommandError, match="by id or by a filter"):
        call_command("replay_dead_letters")
    call_command("replay_dead_letters", "--action", "ticket.comment")
    out = capsys.readouterr().out
    assert "Preview only: 2" in out
    assert Step.objects.get(pk=first.step_id).operation_key in out
    assert DeadLetter.objects.open().count() == 2
    with pytest.raises(CommandError, match="reason"):
        call_command("replay_dead_letters", "--id", str(first.pk), "--yes", "--as", "operator")
    call_command("replay_dead_letters", "--id", str(first.pk), "--yes", "--as", "operator", "--reason", "fixed")
    assert "Replayed 1, refused 0" in capsys.readouterr().out
    assert set(DeadLetter.objects.open()) == {second}
