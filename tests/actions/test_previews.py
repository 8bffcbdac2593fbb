"""Effect previews (docs/explanation/actions.md#actions): a worker takes a read-only look at what each
step would do after submission, reviewers approve the previews they were
shown (their digests sealed beside the plan hash), and an action with
`preview_binding` has its preview taken again just before the effect: a
ticket closed meanwhile blocks its `ticket.close` until a reviewer approves
the new preview."""

import hashlib
import json
import threading
from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.crashing import crash_at
from tests.support.plans import ticket_plan
from tests.support.previewing import approve_shown, wait_for_previews
from tests.support.running import wait_for_status
from workflows import actions, tasks
from workflows.actions import Preview
from workflows.engine import binding, failpoints, policy, previews
from workflows.errors import PreviewChanged, PreviewPending
from workflows.models import Approval, Attempt, AuditEvent, Step, Workflow
from workflows.operations import approvals, cancellation, plans

HOOK_TOKEN = "hk_live_4f9a8b7c6d5e4f3a2b1c0d9e"


def open_ticket(desk, title="Printer on fire") -> dict:
    answer = requests.post(f"{desk.url}/tickets", json={"title": title, "body": "Floor 3"}, timeout=10)
    assert answer.status_code == 201, answer.text
    return answer.json()


def close_on_the_desk(desk, ticket_id) -> None:
    """A person closes the ticket at the desk itself, past the console."""
    answer = requests.post(f"{desk.url}/tickets/{ticket_id}/close", timeout=10)
    assert answer.status_code == 200, answer.text
    assert desk.ticket(ticket_id)["status"] == "closed"


def close_plan(ticket_id, key="close-it") -> dict:
    return {
        "name": f"Close ticket {ticket_id}",
        "submission_key": key,
        "steps": [{"key": "close", "action": "ticket.close", "args": {"ticket_id": ticket_id}}],
    }


def template(request: dict) -> dict:
    """A request template as a preview carries it (docs/explanation/decisions.md#bound-decisions), with its SHA-256."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {**request, "template_sha256": hashlib.sha256(canonical.encode()).hexdigest()}


def ticket_preview(ticket: dict, verb: str, desk_url: str, body: str = "") -> Preview:
    if verb == "close":
        summary = f"Close ticket #{ticket['id']} “{ticket['title']}” (now {ticket['status']})"
        request = {"method": "POST", "url": f"{desk_url}/tickets/{ticket['id']}/close", "headers": {}, "body": ""}
    else:
        summary = f"Comment on ticket #{ticket['id']} “{ticket['title']}” ({ticket['status']})"
        request = {
            "method": "POST",
            "url": f"{desk_url}/tickets/{ticket['id']}/comments",
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"body": body}, separators=(",", ":")),
        }
    return Preview(summary, {"ticket": {key: ticket[key] for key in ("id", "title", "status")}}, template(request))


@pytest.fixture
def hook_policy(settings):
    policy_ = {"HOOK_TOKEN": {"actions": ["http.post"], "hosts": ["hooks.example.com"]}}
    settings.SECRETS_POLICY = policy_
    return policy_


# --- taken by a worker ---------------------------------------------------------


@pytest.mark.live
def test_a_worker_takes_each_steps_preview_after_submission_without_changing_anything(
    api, start_worker, desk, hook_policy
):
    ticket = open_ticket(desk)
    # A remote system may echo a secret the worker holds: redacted where it enters, as every remote text.
    leaky = open_ticket(desk, title=f"Rotated to {HOOK_TOKEN}")
    plan = {
        "name": "Everything at once",
        "submission_key": "previews",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Toner low", "body": "Tray 2"}},
            {"key": "note", "action": "ticket.comment", "args": {"ticket_id": ticket["id"], "body": "On it"}},
            {"key": "echo", "action": "ticket.comment", "args": {"ticket_id": leaky["id"], "body": "Thanks"}},
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": ticket["id"]}},
            {"key": "later", "action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
            {
                "key": "mail",
                "action": "email.send",
                "args": {"to": "ops@example.com", "subject": "Printer fixed", "body": "Done."},
            },
            {
                "key": "hook",
                "action": "http.post",
                "args": {
                    "url": "https://hooks.example.com/deploy?env=prod",
                    "json": {"ticket": ticket["id"]},
                    "headers": {"X-Hook-Token": {"$secret": "HOOK_TOKEN"}},
                },
            },
            {"key": "mark", "action": "noop", "args": {"n": 1}},
        ],
    }
    submitted = api["agent"].post("/workflows", plan)
    assert submitted.status_code == 201, submitted.json()
    # The web request took none of them: they wait for a worker.
    states = {step["key"]: step["preview"]["state"] for step in submitted.json()["steps"]}
    assert states == {
        "open": "PENDING",
        "note": "PENDING",
        "echo": "PENDING",
        "close": "PENDING",
        "later": "PENDING",
        "mail": "PENDING",
        "hook": "PENDING",
        "mark": "NONE",
    }

    start_worker(SECRETS_POLICY=json.dumps(hook_policy), SECRET_HOOK_TOKEN=HOOK_TOKEN)
    steps = wait_for_previews(submitted.json()["id"])

    assert {key: step.preview_state for key, step in steps.items()} == {
        "open": "READY",
        "note": "READY",
        "echo": "READY",
        "close": "READY",
        "later": "READY",
        "mail": "READY",
        "hook": "READY",
        "mark": "NONE",
    }
    assert steps["close"].preview == ticket_preview(ticket, "close", desk.url).as_json()
    assert steps["close"].preview_digest == ticket_preview(ticket, "close", desk.url).digest
    assert steps["note"].preview == ticket_preview(ticket, "comment", desk.url, "On it").as_json()
    # Its ticket is a result of an earlier step: nothing to read before it runs, but the request's template.
    later = f"{desk.url}/tickets/{{{{from:open.result.id}}}}/close"
    assert steps["later"].preview == {
        "summary": f"POST {later}",
        "details": {},
        "request": template({"method": "POST", "url": later, "headers": {}, "body": ""}),
    }
    assert steps["open"].preview["summary"] == "Create a ticket “Toner low” on the desk at 127.0.0.1"
    assert steps["mail"].preview["details"]["to"] == ["ops@example.com"]
    assert steps["mail"].preview["summary"] == "Send “Printer fixed” to ops@example.com"
    assert steps["hook"].preview["details"] | {"headers": None} == {
        "method": "POST",
        "scheme": "https",
        "host": "hooks.example.com",
        "port": None,
        "path": "/deploy",
        "query": True,
        "headers": None,
        "repeated_on_unknown_outcome": False,
    }
    assert steps["hook"].preview["details"]["headers"] == ["X-Hook-Token"]  # the name, never the value
    for step in steps.values():
        assert step.preview_digest == (Preview(**step.preview).digest if step.preview else "")
    assert steps["echo"].preview["details"]["ticket"]["title"] == "Rotated to [REDACTED secret:HOOK_TOKEN]"
    assert HOOK_TOKEN not in json.dumps([step.preview for step in steps.values()])

    # Read-only: the desk recorded nothing but the tickets the test opened, and nothing ran.
    assert [entry["method"] for entry in desk.ledger()] == ["POST", "POST"]
    assert desk.ticket(ticket["id"])["status"] == "open"
    assert not Attempt.objects.exists()
    (event,) = AuditEvent.objects.filter(workflow_id=submitted.json()["id"], verb="workflow.previewed")
    assert event.data["previews"]["close"] == steps["close"].preview_digest

    shown = api["reviewer"].get(f"/workflows/{submitted.json()['id']}").json()
    close = next(step for step in shown["steps"] if step["key"] == "close")
    assert close["preview"] == {
        "state": "READY",
        "summary": steps["close"].preview["summary"],
        "details": steps["close"].preview["details"],
        "request": steps["close"].preview["request"],
        "digest": steps["close"].preview_digest,
        "failure_class": None,
        "error": None,
    }


def test_a_failed_preview_is_stored_as_failed_and_holds_up_approval(api, desk):
    """The preview of a ticket.close carries the request it would send: none
    taken, nothing for an approval to bind, so none is recorded."""
    workflow = plans.submit(api["agent"].user, close_plan(424242)).workflow
    assert tasks.compute_previews(str(workflow.pk)) == 1

    step = Step.objects.get(workflow=workflow)
    assert (step.preview_state, step.preview_failure_class, step.preview, step.preview_digest) == (
        "FAILED",
        "INVALID_ARGUMENTS",
        None,
        "",
    )
    assert "HTTP 404 from GET /tickets/424242" in step.preview_error

    answer = api["reviewer"].post(
        f"/workflows/{workflow.pk}/approve", {"comment": "closing it anyway", "preview_digests": {}}
    )
    assert answer.status_code == 409
    error = answer.json()["error"]
    assert (error["code"], error["step"], error["preview_state"]) == ("preview_pending", "close", "FAILED")
    assert "Step close (ticket.close)" in error["message"]
    assert "taking it failed (INVALID_ARGUMENTS)" in error["message"]
    assert not Approval.objects.exists()
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb__startswith="workflow.approv").exists()
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"


def test_a_desk_that_is_down_fails_the_preview_as_unavailable(api, desk, settings):
    settings.TICKET_DESK_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    workflow = plans.submit(api["agent"].user, close_plan(1)).workflow
    tasks.compute_previews(str(workflow.pk))
    step = Step.objects.get(workflow=workflow)
    assert (step.preview_state, step.preview_failure_class) == ("FAILED", "DEPENDENCY_UNAVAILABLE")


def test_a_preview_task_delivered_twice_changes_nothing_the_second_time(api, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    assert tasks.compute_previews(str(workflow.pk)) == 1
    close_on_the_desk(desk, ticket["id"])
    assert tasks.compute_previews(str(workflow.pk)) == 0
    assert Step.objects.get(workflow=workflow).preview["details"]["ticket"]["status"] == "open"
    assert AuditEvent.objects.filter(workflow_id=workflow.pk, verb="workflow.previewed").count() == 1


def test_a_plan_that_ended_before_its_preview_task_ran_is_not_read_nor_touched(api, desk):
    """The task was queued with the submission; the plan was cancelled before
    a worker took it: nobody will review it, so the remote system is not read
    and the ended plan's audit stream stays as it ended (an archive run
    beside the worker relies on that)."""
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    cancellation.cancel(workflow, by=api["agent"].user, reason="not needed")
    events = AuditEvent.objects.filter(workflow_id=workflow.pk).count()
    assert tasks.compute_previews(str(workflow.pk)) == 0
    assert Step.objects.get(workflow=workflow).preview_state == "PENDING"
    assert AuditEvent.objects.filter(workflow_id=workflow.pk).count() == events
    # And no sweep looks at it again.
    assert Workflow.objects.get(pk=workflow.pk).previews_due_at is None
    assert tasks.compute_due_previews() == 0


# --- due rows, one sweep for many plans -------------------------------------------


def test_a_burst_of_submissions_has_its_previews_taken_by_one_sweep(api, desk):
    """Each submission makes its plan's previews due and queues a wake-up that
    carries nothing (`queue.WAKE_UPS`, collapsed by the lane's broker): one
    task takes every due plan's, oldest first, and leaves none due."""
    ticket = open_ticket(desk)
    submitted = [
        plans.submit(api["agent"].user, close_plan(ticket["id"], key=f"burst-{n}")).workflow for n in range(12)
    ]
    due = list(Workflow.objects.filter(previews_due_at__isnull=False).order_by("previews_due_at"))
    assert [workflow.pk for workflow in due] == [workflow.pk for workflow in submitted]

    assert tasks.compute_due_previews() == 12
    assert set(Step.objects.values_list("preview_state", flat=True)) == {"READY"}
    assert not Workflow.objects.filter(previews_due_at__isnull=False).exists()
    assert AuditEvent.objects.filter(verb="workflow.previewed").count() == 12
    assert tasks.compute_due_previews() == 0  # delivered again: nothing due, nothing read


def test_sweeps_at_once_claim_different_plans_and_a_dead_sweeps_claim_lapses(api, desk, settings):
    """Two workers (or clusters) sweeping at once never read the same plan's
    previews: each claims a plan by a conditional update that moves its time
    ahead by the task's timeout. A sweep killed mid-read leaves its claim,
    which lapses once a task that long would have been killed."""
    ticket = open_ticket(desk)
    first = plans.submit(api["agent"].user, close_plan(ticket["id"], key="one")).workflow
    second = plans.submit(api["agent"].user, close_plan(ticket["id"], key="two")).workflow

    one, two = previews._claim_due(), previews._claim_due()
    assert (one, two) == (first.pk, second.pk)
    assert previews._claim_due() is None  # both held
    assert not previews.any_due()
    held_until = Workflow.objects.get(pk=first.pk).previews_due_at
    assert held_until > timezone.now() + timedelta(seconds=settings.Q_CLUSTER["timeout"] - 5)

    # The first sweep died; its claim lapses, and a later sweep takes the plan.
    Workflow.objects.filter(pk=first.pk).update(previews_due_at=timezone.now() - timedelta(seconds=1))
    assert previews.any_due()
    assert tasks.compute_due_previews() == 1
    assert Step.objects.get(workflow=first).preview_state == "READY"
    assert Step.objects.get(workflow=second).preview_state == "PENDING"  # still its own sweep's


def test_a_revision_makes_its_new_previews_due_again(api, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    assert tasks.compute_due_previews() == 1
    other = open_ticket(desk, title="Other printer")

    decide.revise(workflow, by=api["reviewer"].user, steps=[{"key": "close", "args": {"ticket_id": other["id"]}}])
    assert Workflow.objects.get(pk=workflow.pk).previews_due_at is not None
    assert tasks.compute_due_previews() == 1
    step = Step.objects.get(workflow=workflow)
    assert (step.preview_state, step.preview["details"]["ticket"]["id"]) == ("READY", other["id"])


@pytest.mark.django_db(transaction=True)
def test_storing_previews_takes_the_workflow_row_first_as_a_decision_does(api, desk):
    """A decision locks the workflow, journals, then marks the first step
    ready; storing previews must queue behind it on the workflow's row, not
    take the step rows first (that order deadlocked an approval on PostgreSQL)."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no row locks: a writer holds the whole database")
    from tests.support.locking import holding, in_thread

    workflow = plans.submit(api["agent"].user, close_plan(open_ticket(desk)["id"])).workflow
    release = threading.Event()
    decision = holding(lambda: Workflow.objects.select_for_update().get(pk=workflow.pk), release)
    storing, stored = in_thread(lambda: tasks.compute_previews(str(workflow.pk)))
    storing.join(1.5)
    waited = storing.is_alive()
    release.set()
    decision.join(10)
    storing.join(30)
    assert waited, "storing previews did not wait for the decision holding the workflow"
    assert stored == [1]


# --- approval binds the previews shown --------------------------------------------


def test_an_approval_seals_the_digests_it_was_shown_and_records_them(api, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    tasks.compute_previews(str(workflow.pk))
    digest = Step.objects.get(workflow=workflow).preview_digest

    answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"preview_digests": {"close": digest}})

    assert answer.status_code == 200, answer.json()
    approval = Approval.objects.get(workflow=workflow)
    assert approval.preview_digests == {"close": digest}
    assert json.loads(binding.sealed_text(approval))["previews"] == [["close", digest]]
    assert binding.verifies(approval)
    (event,) = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="workflow.approved")
    assert event.data["preview_digests"] == {"close": digest}
    # Another digest written into the row breaks the seal: the approval no longer counts.
    Approval.objects.filter(pk=approval.pk).update(preview_digests={"close": "0" * 64})
    assert policy.valid_approvals(Workflow.objects.get(pk=workflow.pk), [policy.policy_for("ticket.close")]) == []


@pytest.mark.parametrize("seen", ["another preview", "before the preview was in", "before it was taken again"])
def test_an_approval_of_previews_that_are_no_longer_current_is_refused_with_409(api, desk, seen):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    tasks.compute_previews(str(workflow.pk))
    shown = {
        "another preview": {"close": "0" * 64},
        "before the preview was in": {},
        "before it was taken again": {"close": Step.objects.get(workflow=workflow).preview_digest},
    }[seen]
    if seen == "before it was taken again":
        close_on_the_desk(desk, ticket["id"])
        approvals.retake_previews(workflow, by=api["reviewer2"].user)
        tasks.compute_previews(str(workflow.pk))

    answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"preview_digests": shown})

    assert answer.status_code == 409
    assert answer.json() == {
        "error": {
            "code": "preview_changed",
            "message": PreviewChanged(
                "The effect previews changed since you looked: review the new previews, then decide again."
            ).message,
        }
    }
    assert not Approval.objects.exists()
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb__startswith="workflow.approv").exists()


def test_malformed_preview_digests_are_refused_with_field_errors(api, desk):
    workflow = plans.submit(api["agent"].user, close_plan(1)).workflow
    for body, field in (
        ({"preview_digests": {"close": "abc"}}, "preview_digests.close"),
        ({"preview_digests": ["close"]}, "preview_digests"),
        ({"preview_digest": {}}, "preview_digest"),
    ):
        answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", body)
        assert answer.status_code == 400, body
        assert field in answer.json()["error"]["fields"], answer.json()
    assert not Approval.objects.exists()


def test_a_step_whose_preview_carries_its_request_is_not_approved_before_it_exists(api, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow

    # What a page showing the preview still pending sends: no digest.
    answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"comment": "looks fine", "preview_digests": {}})

    assert answer.status_code == 409
    error = answer.json()["error"]
    assert (error["code"], error["step"], error["preview_state"]) == ("preview_pending", "close", "PENDING")
    assert "a worker has yet to take it" in error["message"]
    assert not Approval.objects.exists()
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"
    with pytest.raises(PreviewPending):
        decide.approve(workflow, by=api["reviewer2"].user, preview_digests={})

    tasks.compute_previews(str(workflow.pk))
    digest = Step.objects.get(workflow=workflow).preview_digest
    answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"preview_digests": {"close": digest}})
    assert answer.status_code == 200, answer.json()
    assert Approval.objects.get(workflow=workflow).preview_digests == {"close": digest}


def test_the_console_explains_why_an_approval_waits_for_a_preview(people, client, desk):
    from tests.support.personas import PASSWORD

    workflow = plans.submit(people["agent"], close_plan(open_ticket(desk)["id"])).workflow
    assert client.login(username="reviewer", password=PASSWORD)

    answer = client.post(f"/workflows/{workflow.pk}/approve", {"comment": "", "previews_shown": "1"}, follow=True)

    document = answer.content.decode()
    assert "Step close (ticket.close) cannot be approved before its preview exists" in document
    assert 'data-testid="preview-pending"' in document
    assert not Approval.objects.exists()
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb__startswith="workflow.approv").exists()


@actions.register
class Look(actions.Action):
    """An action whose preview is a look alone: it builds no request."""

    name = "test.look"

    def perform(self, args, operation_key):
        return actions.Outcome(result={})

    def preview(self, args):
        if args.get("down"):
            raise actions.ActionError("UNAVAILABLE", "the system looked at is down")
        return actions.Preview("a look")


def look_plan(key, **args) -> dict:
    return {"name": key, "submission_key": key, "steps": [{"key": "look", "action": "test.look", "args": args}]}


def test_a_preview_that_is_a_look_alone_does_not_hold_up_approval(api):
    pending = plans.submit(api["agent"].user, look_plan("pending")).workflow
    failed = plans.submit(api["agent"].user, look_plan("failed", down=True)).workflow
    tasks.compute_previews(str(failed.pk))
    assert Step.objects.get(workflow=failed).preview_state == "FAILED"

    for workflow in (pending, failed):
        answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"preview_digests": {}})
        assert answer.status_code == 200, answer.json()
        assert Approval.objects.get(workflow=workflow).preview_digests == {}


def test_an_action_that_requires_its_preview_refuses_approval_until_it_exists(api, monkeypatch):
    monkeypatch.setattr(Look, "preview_required", True)
    pending = plans.submit(api["agent"].user, look_plan("pending")).workflow
    failed = plans.submit(api["agent"].user, look_plan("failed", down=True)).workflow
    tasks.compute_previews(str(failed.pk))

    for workflow, why in ((pending, "a worker has yet to take it"), (failed, "taking it failed (UNAVAILABLE)")):
        answer = api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {"preview_digests": {}})
        assert answer.status_code == 409
        assert answer.json()["error"]["code"] == "preview_pending"
        assert why in answer.json()["error"]["message"]
    assert not Approval.objects.exists()

    tasks.compute_previews(str(pending.pk))
    answer = api["reviewer"].post(f"/workflows/{pending.pk}/approve", {})
    assert answer.status_code == 200, answer.json()


def test_a_reviewer_has_the_previews_taken_again(api, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    tasks.compute_previews(str(workflow.pk))
    close_on_the_desk(desk, ticket["id"])

    answer = api["reviewer"].post(f"/workflows/{workflow.pk}/previews/retake")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["steps"][0]["preview"]["state"] == "PENDING"
    assert api["agent"].post(f"/workflows/{workflow.pk}/previews/retake").status_code == 403
    tasks.compute_previews(str(workflow.pk))

    step = Step.objects.get(workflow=workflow)
    assert step.preview["details"]["ticket"]["status"] == "closed"
    assert AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.previews_requested").data == {
        "steps": ["close"]
    }


# --- a binding preview, taken again before the effect -------------------------------


@pytest.mark.live
def test_a_ticket_closed_after_approval_blocks_the_close_until_its_new_preview_is_approved(api, start_worker, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    tasks.compute_previews(str(workflow.pk))
    approved = approve_shown(api["reviewer"], workflow.pk)
    # After the approval, before any worker runs it: someone closes the ticket at the desk.
    close_on_the_desk(desk, ticket["id"])

    start_worker()
    wait_for_status(workflow.pk, "FAILED")

    step = Step.objects.get(workflow=workflow)
    assert (step.status, step.failure_class) == ("BLOCKED", "POLICY_FAILED")
    assert not Attempt.objects.filter(step=step).exists()  # blocked before its attempt
    assert step.approved_preview["details"]["ticket"]["status"] == "open"
    assert Preview(**step.approved_preview).digest == approved["close"]
    assert step.preview["details"]["ticket"]["status"] == "closed"
    (blocked,) = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked")
    assert blocked.data["problems"] == [
        f"preview changed since it was approved: approved “{step.approved_preview['summary']}”, "
        f"now “{step.preview['summary']}”"
    ]
    assert [entry["idempotency_key"] for entry in desk.ledger()] == [None, None]  # only the desk's own

    reapproved = approve_shown(api["reviewer2"], workflow.pk)
    assert reapproved["close"] == step.preview_digest != approved["close"]
    wait_for_status(workflow.pk, "COMPLETE")
    done = Step.objects.get(workflow=workflow)
    assert (done.status, done.result) == ("COMPLETE", {"id": ticket["id"], "status": "closed"})
    assert list(Attempt.objects.filter(step=step).values_list("status", "operation_key")) == [
        ("SUCCEEDED", step.operation_key)
    ]


@pytest.mark.live
def test_a_binding_preview_that_still_matches_lets_the_effect_run(api, start_worker, desk):
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    start_worker()
    wait_for_previews(workflow.pk)
    approve_shown(api["reviewer"], workflow.pk)
    wait_for_status(workflow.pk, "COMPLETE")
    assert desk.ticket(ticket["id"])["status"] == "closed"
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked").exists()


@pytest.mark.live
def test_after_a_crash_mid_effect_the_binding_preview_is_not_taken_again(api, start_worker, desk, tmp_path):
    """Once an attempt may have acted, the desk may show the step's own
    effect (the ticket it closed): taking the preview again then would block
    a close that already happened."""
    ticket = open_ticket(desk)
    workflow = plans.submit(api["agent"].user, close_plan(ticket["id"])).workflow
    tasks.compute_previews(str(workflow.pk))
    approve_shown(api["reviewer"], workflow.pk)

    crash_at(start_worker, tmp_path, failpoints.AFTER_PERFORM)
    wait_for_status(workflow.pk, "COMPLETE")

    assert desk.ticket(ticket["id"])["status"] == "closed"
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb="step.blocked").exists()
    assert Attempt.objects.filter(step__workflow=workflow).count() == 2


def test_a_binding_step_that_takes_results_of_earlier_steps_runs_bound_to_its_request_template(api, desk):
    """Nothing to read of a ticket that does not exist yet: its preview is
    the template of the request alone, taken again unchanged before the effect."""
    from tests.support.running import run_until

    workflow = plans.submit(api["agent"].user, ticket_plan()).workflow
    tasks.compute_previews(str(workflow.pk))
    close = Step.objects.get(workflow=workflow, key="close")
    assert (close.preview_state, close.preview["details"]) == ("READY", {})
    assert close.preview["request"]["url"] == f"{desk.url}/tickets/{{{{from:open.result.id}}}}/close"
    approve_shown(api["reviewer"], workflow.pk)
    assert set(Approval.objects.get(workflow=workflow).preview_digests) == {"open", "note", "close"}
    run_until(workflow.pk, "COMPLETE")
