"""Reconcile before replay, in bulk (docs/explanation/operations-at-scale.md#operations-at-scale): after a desk outage
in which some effects landed and their answers were lost, an operator sorts the
dead letters into applied / safe / in doubt, settles the applied ones
without a new effect, and replays only the safe ones in a job that workers
advance in batches; every operation key ends up on the desk exactly once,
even when a worker is killed mid-replay."""

import time

import pytest

from tests.support import deciding as decide
from tests.support.crashing import CRASH_ENV, alive
from tests.support.personas import PASSWORD
from tests.support.running import run_job, run_until, wait_for_status
from tests.support.seeing import Client
from workflows.engine import failpoints, jobs, policy
from workflows.models import AuditEvent, DeadLetter, Job, Step, Workflow
from workflows.operations import bulk, plans


def create(people, key, title=None):
    workflow = plans.submit(
        people["agent"],
        {
            "name": "open a ticket",
            "submission_key": key,
            "steps": [{"key": "open", "action": "ticket.create", "args": {"title": title or key}}],
        },
    ).workflow
    decide.approve(workflow, by=people["reviewer"])
    return workflow


def hook(people, desk, key):
    """A webhook that neither honours the key nor can be looked up."""
    workflow = plans.submit(
        people["agent"],
        {
            "name": "hook",
            "submission_key": key,
            "steps": [
                {"key": "hook", "action": "http.post", "args": {"url": f"{desk.url}/tickets", "json": {"title": key}}}
            ],
        },
    ).workflow
    decide.approve(workflow, by=people["reviewer"])
    return workflow


def outage(people, desk, landed, lost, run):
    """`landed` creates whose effect happened but whose answer was lost
    (`commit_then_drop`), `lost` that never reached the desk's store (503);
    one attempt each, so each is dead-lettered at once."""
    policy.update("ticket.create", by=people["operator"], reason="outage drill", max_attempts=1)
    if landed:
        desk.fault(mode="commit_then_drop", count=landed)
    if lost:
        desk.fault(mode="error", status=503, count=lost)
    workflows = [create(people, f"outage-{n}") for n in range(landed + lost)]
    for workflow in workflows:
        run(workflow.pk, "FAILED")
    assert desk.faults() == [], "every fault fired"
    assert len(desk.tickets()) == landed
    assert DeadLetter.objects.open().filter(action="ticket.create").count() == landed + lost
    return workflows


def landed_keys(desk):
    return {ticket["idempotency_key"] for ticket in desk.tickets()}


def assert_each_key_once(workflows, desk):
    tickets = desk.tickets()
    keys = [ticket["idempotency_key"] for ticket in tickets]
    assert len(keys) == len(set(keys)), "an operation key took effect twice"
    expected = {Step.objects.get(workflow=w).operation_key for w in workflows}
    assert set(keys) == expected


# --- in-process: the sorting, the settling, the API ---------------------------------


def test_reconcile_sorts_applied_safe_and_in_doubt_and_settles_only_the_applied(people, desk, api):
    workflows = outage(people, desk, landed=3, lost=3, run=run_until)
    desk.fault(mode="error", status=502, count=1)
    doubtful = hook(people, desk, "hook-1")
    run_until(doubtful.pk, "FAILED")
    landed = landed_keys(desk)
    ledger = len(desk.ledger())

    answer = api["operator"].post("/dead-letters/reconcile", {"filter": {"action": "ticket.create"}, "dry_run": False})
    assert answer.status_code == 202, answer.text
    body = answer.json()
    # Sorted from the flags at once; the lookups are the worker's.
    assert (body["matched"], body["pending"], body["applied"]) == (6, 6, 0)
    assert DeadLetter.objects.open().count() == 7
    run_job(body["job"])

    progress = api["operator"].get(f"/jobs/{body['job']}").json()
    assert (progress["status"], progress["applied"], progress["safe"], progress["in_doubt"]) == ("DONE", 3, 3, 0)
    assert (progress["done"], progress["failed"], progress["remaining"]) == (6, 0, 0)
    assert {s["operation_key"] for s in progress["samples"]["applied"]} == landed
    applied = DeadLetter.objects.filter(status="APPLIED")
    assert {Step.objects.get(pk=d.step_id).operation_key for d in applied} == landed
    for entry in applied:
        step = Step.objects.get(pk=entry.step_id)
        assert step.status == "COMPLETE" and step.external_ref.startswith("ticket:")
        assert list(step.attempts.values_list("status", flat=True)) == ["RECONCILED"]
        assert Workflow.objects.get(pk=entry.workflow_id).status == "COMPLETE"
        event = AuditEvent.objects.get(verb="dead_letter.applied", object_id=str(entry.pk))
        assert event.actor == "operator" and event.data["operation_key"] == step.operation_key
    assert len(desk.ledger()) == ledger, "settling did nothing on the desk"
    assert DeadLetter.objects.open().count() == 4

    # The webhook, alone: no lookup, not idempotent: in doubt, left alone.
    alone = (
        api["operator"]
        .post("/dead-letters/reconcile", {"filter": {"workflow": str(doubtful.pk)}, "dry_run": False})
        .json()
    )
    assert (alone["in_doubt"], alone["pending"]) == (1, 0)
    assert Job.objects.get(pk=alone["job"]).status == "DONE"
    assert DeadLetter.objects.get(workflow=doubtful).status == "OPEN"
    assert len(workflows) == 6


def test_a_dry_run_counts_and_samples_and_changes_nothing(people, desk, api):
    outage(people, desk, landed=2, lost=2, run=run_until)
    events = AuditEvent.objects.count()
    answer = api["operator"].post("/dead-letters/reconcile", {"filter": {"action": "ticket.create"}, "dry_run": True})
    assert answer.status_code == 202
    run_job(answer.json()["job"])
    progress = api["operator"].get(f"/jobs/{answer.json()['job']}").json()
    assert (progress["dry_run"], progress["applied"], progress["safe"]) == (True, 2, 2)
    assert len(progress["samples"]["applied"]) == 2 and len(progress["samples"]["safe"]) == 2
    assert DeadLetter.objects.open().count() == 4
    assert set(Step.objects.values_list("status", flat=True)) == {"DEAD_LETTERED"}
    assert AuditEvent.objects.count() == events


def test_replay_of_the_safe_group_runs_each_key_once_and_leaves_the_doubtful(people, desk, api):
    workflows = outage(people, desk, landed=2, lost=3, run=run_until)
    desk.fault(mode="error", status=502, count=1)
    doubtful = hook(people, desk, "hook-2")
    run_until(doubtful.pk, "FAILED")
    policy.update("ticket.create", by=people["operator"], reason="desk is back", max_attempts=3)
    # Had a landed create been run again, this desk would open a second ticket.
    desk.fault(mode="ignore_idempotency")

    answer = api["operator"].post(
        "/dead-letters/replay", {"filter": {"failure_class": "TRANSIENT"}, "dry_run": False, "reason": "desk is back"}
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["matched"] == 6
    job = run_job(answer.json()["job"])
    progress = bulk.counts(job)
    assert (progress["applied"], progress["replayed"], progress["in_doubt"], progress["failed"]) == (2, 3, 1, 0)
    for workflow in workflows:
        run_until(workflow.pk, "COMPLETE")
    assert_each_key_once(workflows, desk)
    assert DeadLetter.objects.get(workflow=doubtful).status == "OPEN"
    replays = AuditEvent.objects.filter(verb="step.replayed")
    assert replays.count() == 3 and {e.data["reason"] for e in replays} == {"desk is back"}
    for event in replays:
        step = Step.objects.get(pk=event.object_id)
        assert event.data["operation_key"] == step.operation_key


def test_only_all_replays_the_doubtful_too(people, desk, api):
    desk.fault(mode="error", status=502, count=1)
    doubtful = hook(people, desk, "hook-3")
    run_until(doubtful.pk, "FAILED")
    answer = api["operator"].post(
        "/dead-letters/replay",
        {"filter": {"workflow": str(doubtful.pk)}, "only": "all", "dry_run": False, "reason": "checked by hand"},
    )
    job = run_job(answer.json()["job"])
    assert bulk.counts(job)["replayed"] == 1
    assert DeadLetter.objects.get(workflow=doubtful).status == "REPLAYED"


def test_pause_and_resume_keep_progress_in_the_database(people, desk, api, settings):
    settings.BULK_BATCH_SIZE = 2
    outage(people, desk, landed=0, lost=5, run=run_until)
    job_id = (
        api["operator"]
        .post("/dead-letters/replay", {"filter": {"action": "ticket.create"}, "dry_run": False, "reason": "r"})
        .json()["job"]
    )
    job = Job.objects.get(pk=job_id)
    assert bulk.advance(job.pk, job.batch) == 2
    assert api["operator"].post(f"/jobs/{job_id}/pause").json()["status"] == "PAUSED"
    assert api["operator"].post(f"/jobs/{job_id}/pause").status_code == 409
    job.refresh_from_db()
    assert bulk.advance(job.pk, job.batch) == 0, "a paused job does not move"
    # A batch task delivered twice, or late, does nothing.
    assert bulk.advance(job.pk, job.batch - 1) == 0
    progress = api["operator"].get(f"/jobs/{job_id}").json()
    assert (progress["done"], progress["remaining"], progress["status"]) == (2, 3, "PAUSED")
    assert api["operator"].post(f"/jobs/{job_id}/resume").json()["status"] == "RUNNING"
    run_job(job_id)
    assert api["operator"].get(f"/jobs/{job_id}").json()["replayed"] == 5
    verbs = list(AuditEvent.objects.filter(object_id=job_id).values_list("verb", flat=True))
    assert verbs == ["job.replay", "job.paused", "job.resumed", "job.finished"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"dry_run": True}, "filter"),
        ({"filter": {}, "dry_run": True}, "filter"),
        ({"filter": {"status": "OPEN"}, "dry_run": True}, "filter"),
        ({"filter": {"action": "ticket.create", "status": "REPLAYED"}, "dry_run": True}, "filter.status"),
        ({"filter": {"older_than": "ninety days"}, "dry_run": True}, "filter.older_than"),
        ({"filter": {"older_than": "0d"}, "dry_run": True}, "filter.older_than"),
        ({"filter": {"ids": []}, "dry_run": True}, "filter.ids"),
        ({"filter": {"ids": ["x"]}, "dry_run": True}, "filter.ids.0"),
        ({"filter": {"job": "nope"}, "dry_run": True}, "filter.job"),
        ({"filter": {"team": ""}, "dry_run": True}, "filter.team"),
        ({"filter": {"action": "ticket.create"}}, "dry_run"),
        ({"filter": {"action": "ticket.create"}, "dry_run": 1}, "dry_run"),
    ],
)
def test_a_bad_reconcile_is_refused_with_its_field_and_changes_nothing(people, desk, api, body, field):
    outage(people, desk, landed=1, lost=0, run=run_until)
    events, jobs = AuditEvent.objects.count(), Job.objects.count()
    answer = api["operator"].post("/dead-letters/reconcile", body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["fields"]
    assert (AuditEvent.objects.count(), Job.objects.count()) == (events, jobs)
    assert DeadLetter.objects.get().status == "OPEN"


def test_a_bad_replay_only_is_refused(people, desk, api):
    outage(people, desk, landed=1, lost=0, run=run_until)
    answer = api["operator"].post(
        "/dead-letters/replay", {"filter": {"action": "ticket.create"}, "only": "most", "dry_run": False, "reason": "r"}
    )
    assert answer.status_code == 400 and "only" in answer.json()["error"]["fields"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "agent"])
def test_only_operators_reconcile_and_run_jobs(people, desk, api, persona):
    outage(people, desk, landed=1, lost=0, run=run_until)
    assert (
        api[persona]
        .post("/dead-letters/reconcile", {"filter": {"action": "ticket.create"}, "dry_run": True})
        .status_code
        == 403
    )
    job = (
        api["operator"]
        .post("/dead-letters/reconcile", {"filter": {"action": "ticket.create"}, "dry_run": True})
        .json()["job"]
    )
    # Auditors may follow a job of their team (then a pause is 403); only
    # operators act on it. Reviewers' and agents' roles read no jobs: 403.
    assert api[persona].get(f"/jobs/{job}").status_code == (200 if persona == "auditor" else 403)
    assert api[persona].post(f"/jobs/{job}/pause").status_code == 403
    assert Job.objects.get(pk=job).status == "RUNNING"


def test_a_job_stays_within_its_team(people, desk, api):
    from django.contrib.auth.models import Group, User

    from tests.support.api import ApiClient
    from workflows.models import Team

    other = User.objects.create_user("pay-operator", password=PASSWORD)
    other.groups.add(Group.objects.get(name="operators"))
    Team.objects.create(name="payments").members.add(other)
    outage(people, desk, landed=1, lost=0, run=run_until)
    job = (
        api["operator"]
        .post("/dead-letters/reconcile", {"filter": {"action": "ticket.create"}, "dry_run": True})
        .json()["job"]
    )
    assert ApiClient(other).get(f"/jobs/{job}").status_code == 404
    assert ApiClient(other).post(f"/jobs/{job}/pause").status_code == 404
    assert Job.objects.get(pk=job).team.name == "default"
    # Another team's job as a selection chooses nothing.
    mine = ApiClient(other).post("/dead-letters/reconcile", {"filter": {"job": job}, "dry_run": True}).json()
    assert mine["matched"] == 0


def test_the_console_reconciles_shows_the_groups_and_replays_the_safe_ones(people, desk):
    outage(people, desk, landed=1, lost=2, run=run_until)
    console = Client()
    console.login(username="operator", password=PASSWORD)
    answer = console.post("/dead-letters/reconcile", {"scope": "filter", "action": "ticket.create"})
    assert answer.status_code == 302 and answer["Location"].startswith("/jobs/")
    job = Job.objects.get()
    running = console.get(answer["Location"]).content.decode()
    assert "RUNNING" in running and "every 2s" in running and "0 done · 0 failed · 3 remaining of 3" in running
    console.post(f"/jobs/{job.pk}/pause")
    job.refresh_from_db()
    assert job.status == "PAUSED" and ">Resume</button>" in console.get(answer["Location"]).content.decode()
    console.post(f"/jobs/{job.pk}/resume")
    run_job(job.pk)
    page = console.get(answer["Location"]).content.decode()
    assert "Already applied</th><td>1" in page and "Safe to replay</th><td>2" in page
    assert "In doubt</th><td>0" in page and "DONE" in page
    replay = console.post(f"/jobs/{job.pk}/replay", {"only": "safe", "reason": "desk is back"})
    assert replay.status_code == 302
    second = Job.objects.exclude(pk=job.pk).get()
    assert replay["Location"] == f"/jobs/{second.pk}/"
    assert (second.kind, second.only, second.filter) == ("replay", "safe", {"job": str(job.pk)})
    run_job(second.pk)
    assert bulk.counts(second)["replayed"] == 2
    assert set(DeadLetter.objects.values_list("status", flat=True)) == {"APPLIED", "REPLAYED"}
    # Others may not look: a reviewer's role reads no jobs (403, as the API answers).
    reviewer = Client()
    reviewer.login(username="reviewer", password=PASSWORD)
    assert reviewer.get(f"/jobs/{job.pk}/").status_code == 403
    assert reviewer.post("/dead-letters/reconcile", {"scope": "filter", "action": "ticket.create"}).status_code == 403


# --- real workers: the desk outage, and a worker killed mid-replay ------------------


def wait_for_job(job_id, timeout=60.0) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = Job.objects.get(pk=job_id)
        if job.status == Job.Status.DONE:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} is {job.status}: {bulk.counts(job)}")


@pytest.mark.parametrize("killed", [False, True], ids=["clean", "worker-killed-mid-replay"])
def test_after_a_desk_outage_reconcile_and_replay_put_each_key_on_the_desk_once(
    people, desk, api, start_worker, tmp_path, killed
):
    landed, lost = 12, 12
    first = start_worker(name="during-outage", **CRASH_ENV)
    workflows = outage(people, desk, landed, lost, run=lambda pk, status: wait_for_status(pk, status, timeout=60))
    assert {ticket["idempotency_key"] for ticket in desk.tickets()} <= {
        Step.objects.get(workflow=w).operation_key for w in workflows
    }

    reconciled = api["operator"].post(
        "/dead-letters/reconcile", {"filter": {"action": "ticket.create"}, "dry_run": False}
    )
    assert reconciled.status_code == 202, reconciled.text
    job = wait_for_job(reconciled.json()["job"])
    counts = bulk.counts(job)
    assert (counts["applied"], counts["safe"], counts["in_doubt"], counts["failed"]) == (landed, lost, 0, 0)
    assert DeadLetter.objects.filter(status="APPLIED").count() == landed
    assert Workflow.objects.filter(status="COMPLETE").count() == landed
    first.stop()

    # The desk is back, but would open a second ticket for a repeated key.
    policy.update("ticket.create", by=people["operator"], reason="desk is back", max_attempts=3)
    desk.fault(mode="ignore_idempotency")
    env = {**CRASH_ENV, "BULK_BATCH_SIZE": "3"}
    marker = tmp_path / "failpoints.log"
    if killed:
        doomed = start_worker(name="doomed", FAILPOINTS=failpoints.IN_BULK_BATCH, FAILPOINT_MARKER=str(marker), **env)
    else:
        start_worker(name="after-outage", **env)
    replay = api["operator"].post(
        "/dead-letters/replay", {"filter": {"job": str(job.pk)}, "dry_run": False, "reason": "the desk is back"}
    )
    assert replay.status_code == 202, replay.text
    assert replay.json()["matched"] == lost
    if killed:
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text().strip()):
            assert time.monotonic() < deadline, f"the batch never reached its failpoint:\n{doomed.log()}"
            time.sleep(0.05)
        pid, label = marker.read_text().split()[:2]
        assert label == failpoints.IN_BULK_BATCH
        while alive(int(pid)):
            assert time.monotonic() < deadline, f"process {pid} survived its failpoint"
            time.sleep(0.05)
        doomed.kill()
        start_worker(name="restarted", **env)
    # A batch task the killed cluster had taken from the queue but not begun
    # is queued again when its job has stood still for STALL_SECONDS (its
    # queue row stays locked for Q_RETRY): the job may take that long.
    replayed = wait_for_job(replay.json()["job"], timeout=jobs.STALL_SECONDS + 45.0)
    counts = bulk.counts(replayed)
    assert (counts["replayed"], counts["failed"], counts["applied"], counts["remaining"]) == (lost, 0, 0, 0)
    for workflow in workflows:
        wait_for_status(workflow.pk, "COMPLETE", timeout=60)
    assert_each_key_once(workflows, desk)
    assert AuditEvent.objects.filter(verb="step.replayed").count() == lost
