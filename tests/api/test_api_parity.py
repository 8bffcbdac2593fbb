"""Everything the console lets a person do, the API does too: same roles,
same operations, same audit (resolve, bulk replay, discard, verify), and an
agent sees the dead letters of its own workflows only."""

import inspect
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.api import ApiClient
from tests.support.deadletters import BAD
from tests.support.personas import PASSWORD
from tests.support.running import run_job, run_until
from workflows.engine import execution, policy, recovery
from workflows.models import AuditEvent, DeadLetter, Step
from workflows.operations import plans
from workflows.web import urls as console_urls

MAIL = {
    "name": "notify",
    "steps": [
        {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": "b"}},
        {"key": "after", "action": "noop", "args": {}},
    ],
}


@pytest.fixture
def mail_to_files(settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)


def in_doubt(people, key):
    """An email whose worker died after the REQUESTED checkpoint."""
    workflow = plans.submit(people["agent"], {**MAIL, "submission_key": key}).workflow
    decide.approve(workflow, by=people["reviewer"])
    step = execution.claim(workflow.pk)
    execution._request_attempt(step, step.fence)
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    # Email has no lookup: the retry finds it cannot tell, and stops for a person.
    execution.run_workflow(workflow.pk)
    step.refresh_from_db()
    assert step.status == "IN_DOUBT"
    return step


def trail(workflow_id, after: int) -> list[tuple]:
    """The audit events of a workflow after event `after`, without what differs between two workflows."""
    return [
        (e.actor, e.verb, e.object_type, e.data)
        for e in AuditEvent.objects.filter(workflow_id=workflow_id, id__gt=after).order_by("seq")
    ]


def last_event_id() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()


# --- resolve ----------------------------------------------------------------


def test_resolving_over_the_api_equals_resolving_in_the_console(people, api, client, mail_to_files):
    by_api, by_page = in_doubt(people, "api"), in_doubt(people, "page")
    before = last_event_id()
    answer = api["operator"].post(
        f"/workflows/{by_api.workflow_id}/steps/mail/resolve",
        {"decision": "happened", "external_ref": "smtp:250", "reason": "in the mail log"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "RUNNING"
    assert client.login(username="operator", password=PASSWORD)
    client.post(
        f"/workflows/{by_page.workflow_id}/steps/mail/resolve",
        {"decision": "happened", "external_ref": "smtp:250", "reason": "in the mail log"},
    )

    resolved = [Step.objects.get(pk=step.pk) for step in (by_api, by_page)]
    assert [(s.status, s.external_ref, s.result) for s in resolved] == [
        ("COMPLETE", "smtp:250", {"external_ref": "smtp:250"})
    ] * 2
    assert trail(by_api.workflow_id, before) == trail(by_page.workflow_id, before)
    assert ("operator", "step.resolved") in [t[:2] for t in trail(by_api.workflow_id, before)]


def test_resolve_takes_the_result_seen_in_the_other_system(people, api, mail_to_files):
    step = in_doubt(people, "result")
    answer = api["operator"].post(
        f"/workflows/{step.workflow_id}/steps/mail/resolve",
        {"decision": "happened", "external_ref": "smtp:250", "result": {"queued": "ab12"}, "reason": "log"},
    )
    assert answer.status_code == 200
    mail = next(s for s in answer.json()["steps"] if s["key"] == "mail")
    assert (mail["status"], mail["result"]) == ("COMPLETE", {"queued": "ab12"})


def test_resolve_not_happened_runs_the_step_again_with_its_operation_key(people, api, mail_to_files, tmp_path):
    step = in_doubt(people, "again")
    answer = api["operator"].post(
        f"/workflows/{step.workflow_id}/steps/mail/resolve", {"decision": "not_happened", "reason": "not in the log"}
    )
    assert answer.status_code == 200
    run_until(step.workflow_id, "COMPLETE")
    sent = list(tmp_path.iterdir())
    assert len(sent) == 1 and step.operation_key in sent[0].read_text()


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "agent"])
def test_only_operators_resolve_over_the_api(people, api, mail_to_files, persona):
    step = in_doubt(people, "roles")
    answer = api[persona].post(
        f"/workflows/{step.workflow_id}/steps/mail/resolve", {"decision": "not_happened", "reason": "x"}
    )
    assert answer.status_code == 403
    assert Step.objects.get(pk=step.pk).status == "IN_DOUBT"


def test_resolve_of_an_unknown_step_or_anothers_workflow_is_not_found(people, api, mail_to_files, django_user_model):
    step = in_doubt(people, "missing")
    body = {"decision": "not_happened", "reason": "x"}
    assert api["operator"].post(f"/workflows/{step.workflow_id}/steps/nope/resolve", body).status_code == 404
    stranger = ApiClient(django_user_model.objects.create_user("stranger"))
    assert stranger.post(f"/workflows/{step.workflow_id}/steps/mail/resolve", body).status_code == 404
    assert Step.objects.get(pk=step.pk).status == "IN_DOUBT"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"decision": "maybe", "reason": "x"}, "decision"),
        ({"reason": "x"}, "decision"),
        ({"decision": "not_happened"}, "reason"),
        ({"decision": "not_happened", "reason": " "}, "reason"),
        ({"decision": "happened", "reason": "trust me"}, "external_ref"),
        ({"decision": "compensate", "reason": "undo", "external_ref": ""}, "external_ref"),
        ({"decision": "happened", "reason": "x", "external_ref": "r" * 201}, "external_ref"),
        ({"decision": "happened", "reason": "x", "external_ref": "r", "result": [1]}, "result"),
        ({"decision": "not_happened", "reason": "x", "extra": 1}, "extra"),
    ],
)
def test_a_bad_resolution_is_refused_with_its_field_and_changes_nothing(people, api, mail_to_files, body, field):
    step = in_doubt(people, "bad")
    before = last_event_id()
    answer = api["operator"].post(f"/workflows/{step.workflow_id}/steps/mail/resolve", body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["fields"]
    assert Step.objects.get(pk=step.pk).status == "IN_DOUBT"
    assert last_event_id() == before


def test_resolving_a_step_that_is_not_in_doubt_is_a_conflict(people, api, mail_to_files):
    step = in_doubt(people, "twice")
    body = {"decision": "happened", "external_ref": "smtp:250", "reason": "log"}
    assert api["operator"].post(f"/workflows/{step.workflow_id}/steps/mail/resolve", body).status_code == 200
    assert api["operator"].post(f"/workflows/{step.workflow_id}/steps/mail/resolve", body).status_code == 409


# --- dead letters -------------------------------------------------------------


def dead_letter(user, reviewer, key) -> DeadLetter:
    workflow = plans.submit(user, {**BAD, "submission_key": key}).workflow
    decide.approve(workflow, by=reviewer)
    run_until(workflow.pk, "FAILED")
    return DeadLetter.objects.get(workflow=workflow)


def test_bulk_replay_dry_run_says_what_would_run_and_the_replay_does_exactly_that(people, api, desk):
    entries = [dead_letter(people["agent"], people["reviewer"], f"bulk-{n}") for n in range(2)]
    ids = sorted(str(entry.pk) for entry in entries)
    before = last_event_id()

    dry = api["operator"].post("/dead-letters/replay", {"filter": {"action": "ticket.comment"}, "dry_run": True})

    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert (body["dry_run"], body["matched"], body["capped"], body["refused"]) == (True, 2, False, [])
    assert sorted(body["replayed"]) == ids
    assert sorted(p["dead_letter_id"] for p in body["previews"]) == ids
    assert all(p["will_run"] and p["operation_key"] for p in body["previews"])
    assert last_event_id() == before
    assert set(DeadLetter.objects.values_list("status", flat=True)) == {"OPEN"}

    real = api["operator"].post(
        "/dead-letters/replay",
        {"filter": {"action": "ticket.comment", "status": "OPEN"}, "dry_run": False, "reason": "ticket exists now"},
    )

    assert real.status_code == 202, real.text
    job = real.json()["job"]
    run_job(job)
    progress = api["operator"].get(f"/jobs/{job}").json()
    assert (progress["status"], progress["replayed"], progress["failed"], progress["remaining"]) == ("DONE", 2, 0, 0)
    assert set(DeadLetter.objects.values_list("status", flat=True)) == {"REPLAYED"}
    replays = AuditEvent.objects.filter(verb="step.replayed")
    assert {(e.actor, e.data["reason"]) for e in replays} == {("operator", "ticket exists now")}
    assert replays.count() == 2


def test_bulk_replay_obeys_current_policy_in_the_dry_run_and_the_replay(people, api, desk):
    entry = dead_letter(people["agent"], people["reviewer"], "switched-off")
    policy.update("ticket.comment", by=people["operator"], reason="kill switch", enabled=False)
    chosen = {"filter": {"workflow": str(entry.workflow_id)}}

    dry = api["operator"].post("/dead-letters/replay", {**chosen, "dry_run": True}).json()
    real = api["operator"].post("/dead-letters/replay", {**chosen, "dry_run": False, "reason": "try"})

    assert dry["replayed"] == [] and [r["id"] for r in dry["refused"]] == [str(entry.pk)]
    assert "action enabled" in dry["refused"][0]["reason"]
    assert real.status_code == 202
    run_job(real.json()["job"])
    progress = api["operator"].get(f"/jobs/{real.json()['job']}").json()
    assert progress["replayed"] == 0 and progress["failed"] == 1
    assert "action enabled" in progress["samples"]["failed"][0]["detail"]
    entry.refresh_from_db()
    assert entry.status == "OPEN"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"dry_run": True}, "filter"),
        ({"filter": {}, "dry_run": True}, "filter"),
        ({"filter": {"status": "OPEN"}, "dry_run": True}, "filter"),
        ({"filter": {"action": "ticket.comment", "status": "REPLAYED"}, "dry_run": True}, "filter.status"),
        ({"filter": {"action": "ticket.comment", "cursor": "x"}, "dry_run": True}, "filter.cursor"),
        ({"filter": {"failure_class": "NOPE"}, "dry_run": True}, "filter.failure_class"),
        ({"filter": {"workflow": "not-a-uuid"}, "dry_run": True}, "filter.workflow"),
        ({"filter": {"action": "ticket.comment"}}, "dry_run"),
        ({"filter": {"action": "ticket.comment"}, "dry_run": "yes"}, "dry_run"),
        ({"filter": {"action": "ticket.comment"}, "dry_run": False}, "reason"),
        ({"filter": {"action": "ticket.comment"}, "dry_run": False, "reason": "  "}, "reason"),
    ],
)
def test_a_bad_bulk_replay_is_refused_with_its_field_and_changes_nothing(people, api, desk, body, field):
    entry = dead_letter(people["agent"], people["reviewer"], "bad-body")
    before = last_event_id()
    answer = api["operator"].post("/dead-letters/replay", body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["fields"]
    entry.refresh_from_db()
    assert entry.status == "OPEN" and last_event_id() == before


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "agent"])
def test_only_operators_bulk_replay(people, api, desk, persona):
    entry = dead_letter(people["agent"], people["reviewer"], "bulk-roles")
    answer = api[persona].post(
        "/dead-letters/replay", {"filter": {"workflow": str(entry.workflow_id)}, "dry_run": False, "reason": "x"}
    )
    assert answer.status_code == 403
    entry.refresh_from_db()
    assert entry.status == "OPEN"


def test_discard_takes_a_reason_and_audits_it(people, api, desk):
    entry = dead_letter(people["agent"], people["reviewer"], "discard")
    blank = api["operator"].post(f"/dead-letters/{entry.pk}/discard", {"reason": ""})
    assert blank.status_code == 400 and "reason" in blank.json()["error"]["fields"]
    assert api["agent"].post(f"/dead-letters/{entry.pk}/discard", {"reason": "mine"}).status_code == 403
    entry.refresh_from_db()
    assert entry.status == "OPEN"
    done = api["operator"].post(f"/dead-letters/{entry.pk}/discard", {"reason": "handled by hand"})
    assert done.status_code == 200 and done.json()["status"] == "DISCARDED"
    event = AuditEvent.objects.get(verb="dead_letter.discarded")
    assert (event.actor, event.data["reason"]) == ("operator", "handled by hand")


def test_an_agent_sees_the_dead_letters_of_its_own_workflows_only(people, api, desk, django_user_model):
    other = django_user_model.objects.create_user("other-agent")
    mine = dead_letter(people["agent"], people["reviewer"], "mine")
    theirs = dead_letter(other, people["reviewer"], "theirs")

    listed = api["agent"].get("/dead-letters")
    assert listed.status_code == 200
    assert [item["id"] for item in listed.json()["items"]] == [str(mine.pk)]
    assert api["agent"].get("/dead-letters", workflow=str(theirs.workflow_id)).json()["items"] == []
    assert api["agent"].get(f"/dead-letters/{mine.pk}").status_code == 200
    assert api["agent"].get(f"/dead-letters/{theirs.pk}").status_code == 404
    assert ApiClient(other).get(f"/dead-letters/{mine.pk}").status_code == 404
    assert {item["id"] for item in api["operator"].get("/dead-letters").json()["items"]} == {
        str(mine.pk),
        str(theirs.pk),
    }
    # A reviewer's role reads no dead letters: 403 for the list and one, as in
    # the console (tests/api/test_read_side.py).
    assert api["reviewer"].get("/dead-letters").status_code == 403
    assert api["reviewer"].get(f"/dead-letters/{mine.pk}").status_code == 403


# --- audit verification --------------------------------------------------------


def test_auditors_verify_the_chain_over_the_api(people, api):
    workflow = plans.submit(people["agent"], {**BAD, "submission_key": "verify"}).workflow
    whole = api["auditor"].post("/audit/verify", {})
    assert whole.status_code == 200, whole.text
    assert (whole.json()["ok"], whole.json()["scope"], whole.json()["by"]) == (True, "", "auditor")
    one = api["auditor"].post("/audit/verify", {"workflow": str(workflow.pk)}).json()
    assert (one["ok"], one["scope"], one["streams"]) == (True, str(workflow.pk), 1)
    assert api["operator"].post("/audit/verify", {}).status_code == 403
    assert "workflow" in api["auditor"].post("/audit/verify", {"workflow": "x"}).json()["error"]["fields"]


# --- every console action has its API twin, listed in the agents' guide -----


def console_posts() -> set[str]:
    """The console's routes whose view takes a POST (its decorators say so), as `/path/<param>`."""
    found = set()
    for pattern in console_urls.urlpatterns:
        view = pattern.callback
        if pattern.name in ("login", "logout", "oidc_backchannel_logout"):  # sign-in plumbing, not console actions
            continue
        if pattern.name in ("slack_interactions", "slack_link"):  # Slack's callback; a person's handshake in a browser
            continue
        source = inspect.getsource(view)
        if "@require_POST" in source or re.search(r"require_http_methods\(\[[^]]*\"POST\"", source):
            route = re.sub(
                r"<(?:\w+:)?(\w+)>",
                lambda m: "<id>" if m.group(1).endswith("_id") else f"<{m.group(1)}>",
                str(pattern.pattern),
            )
            found.add("/" + route.replace("<step_key>", "<key>"))
    return found


def test_every_console_post_has_an_api_twin_in_the_guide_s_table(api):
    guide = Path(django_settings.BASE_DIR, "docs", "guides", "agents.md").read_text()
    rows = re.findall(r"^\| `(/[^`]+)` \| [^|]+ \| `(PATCH|POST|PUT|DELETE) (/api/v1/[^`]+)`", guide, re.MULTILINE)
    listed = {console: (method, path) for console, method, path in rows}
    posts = console_posts()
    assert "/workflows/<id>/cancel" in posts and "/audit/verify" in posts
    assert posts <= set(listed), posts - set(listed)
    schema = {
        re.sub(r"{\w+}", "{}", path): operations
        for path, operations in api["admin"].get("/openapi.json").json()["paths"].items()
    }
    for method, path in listed.values():
        assert method.lower() in schema.get(re.sub(r"{\w+}", "{}", path), {}), f"{method} {path} is not in the schema"
