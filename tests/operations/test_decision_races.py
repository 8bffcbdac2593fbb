"""Races that peers get wrong, run with real processes, many rounds each.

The console and its API are served by one web server started as
production starts it (gunicorn with the ASGI front, two processes of four
threads: two requests at once may be served by two processes); workers are
real `qcluster` processes and effects land on the real ticket desk. The
people of a round send their requests from threads released by one
barrier, each on its own connection, naming what their own read showed.

- Two reviewers approving one plan at once, and one reviewer's double
  click: every approval answered 200 is recorded and audited exactly once,
  every other answer is a 409 that recorded nothing, and a plan is approved
  once.
- A revision landing between a reviewer's read and click: the approval
  lands first (and, when the edit follows, no longer counts), or is refused
  as stale; what runs at the desk is the approved revision's arguments.
- A decision arriving while an agent's wait is being set up: the wait
  answers with it, never at its timeout.
- A page loaded before someone else decided: its approve is refused and
  recorded nowhere, and the reload shows the decision, with no form.
- A retry after a worker was killed mid-effect keeps the first attempt's
  record, and the audit trail has both attempts.
"""

import time
from functools import partial

import pytest

from tests.support import deciding as decide
from tests.support.racing import Console, Person, at_once, decision_form, status_shown, web_password
from tests.support.running import wait_for_status
from workflows.audit import journal
from workflows.engine import policy
from workflows.models import Approval, Attempt, AuditEvent, Step, Workflow
from workflows.operations import plans
from workflows.ops import processes
from workflows.ops.processes import WebServer, database_url
from workflows.states import PreviewState
from workflows.web import waiting

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live]

ROUNDS = 15
DECIDED = ("workflow.approval_recorded", "workflow.approved", "workflow.rejected")
# Who goes first, by how much: mostly together, sometimes a hair apart either way.
OFFSETS = [(0, 0), (0, 0.002), (0.002, 0), (0, 0.01), (0.01, 0), (0, 0.03), (0.03, 0)]


@pytest.fixture(scope="module")
def web_server(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        url = database_url()
    env = {"DATABASE_URL": url, "WEB_THREADS": "4", "DEBUG": "1"}
    with WebServer("races-web", tmp_path_factory.mktemp("web"), env, workers=2) as server:
        yield server


@pytest.fixture
def web(web_server, people):
    return {name: Person(web_server.url, user) for name, user in people.items()}


def submitted(people, key: str, action: str = "noop", args: dict | None = None) -> Workflow:
    body = {
        "name": f"plan {key}",
        "submission_key": key,
        "steps": [{"key": "open", "action": action, "args": args if args is not None else {}}],
    }
    return plans.submit(people["agent"], body).workflow


def decisions(workflow_id) -> list[tuple[str, str, dict]]:
    return list(
        AuditEvent.objects.filter(workflow_id=workflow_id, verb__in=DECIDED)
        .order_by("id")
        .values_list("actor", "verb", "data")
    )


def approvers(workflow_id) -> list[str]:
    return sorted(
        Approval.objects.filter(workflow_id=workflow_id, decision=Approval.Decision.APPROVE).values_list(
            "reviewer__username", flat=True
        )
    )


def error_code(answer) -> str:
    return answer.json()["error"]["code"]


# --- two approvals at once ----------------------------------------------------------


@pytest.mark.parametrize("required", [1, 2])
def test_two_reviewers_approving_one_plan_at_once_are_each_recorded_once_or_refused(web, people, required):
    policy.update("noop", by="admin", approvals_required=required)
    first, second = web["reviewer"], web["reviewer2"]
    for n in range(ROUNDS):
        workflow = submitted(people, f"both-{required}-{n}")
        seen = [first.read(workflow.pk), second.read(workflow.pk)]
        answers = [
            answer
            for answer, _ in at_once(
                partial(first.approve, workflow.pk, seen[0]),
                partial(second.approve, workflow.pk, seen[1]),
                delays=OFFSETS[n % len(OFFSETS)],
            )
        ]
        codes = [answer.status_code for answer in answers]
        won = sorted(person.name for person, answer in zip((first, second), answers) if answer.status_code == 200)
        where = (required, n, [answer.text for answer in answers])
        if required == 2:
            assert codes == [200, 200], where  # the second saw the first, and counted it
        else:
            assert sorted(codes) == [200, 409], where
            assert error_code(answers[codes.index(409)]) == "conflict", where
        assert approvers(workflow.pk) == won, where
        events = decisions(workflow.pk)
        assert sorted(actor for actor, _, _ in events) == won, where  # each recorded approval audited once
        approved = [data for _, verb, data in events if verb == "workflow.approved"]
        assert len(approved) == 1 and approved[0]["approvals"] == required, where
        assert Workflow.objects.get(pk=workflow.pk).status == "APPROVED", where
    assert journal.verify().ok


@pytest.mark.parametrize("required", [1, 2])
def test_one_reviewer_double_clicking_approve_is_recorded_once(web, people, required):
    policy.update("noop", by="admin", approvals_required=required)
    click, again = web["reviewer"], web["reviewer"].again()
    for n in range(ROUNDS):
        workflow = submitted(people, f"double-{required}-{n}")
        seen = click.read(workflow.pk)
        answers = [
            answer
            for answer, _ in at_once(
                partial(click.approve, workflow.pk, seen),
                partial(again.approve, workflow.pk, seen),
                delays=OFFSETS[n % len(OFFSETS)],
            )
        ]
        codes = [answer.status_code for answer in answers]
        where = (required, n, [answer.text for answer in answers])
        assert sorted(codes) == [200, 409], where
        refusal = answers[codes.index(409)].json()["error"]
        assert refusal["code"] == "conflict", where
        assert ("already approved" in refusal["message"]) == (required == 2), where
        assert approvers(workflow.pk) == ["reviewer"], where
        assert [actor for actor, _, _ in decisions(workflow.pk)] == ["reviewer"], where
        assert Workflow.objects.get(pk=workflow.pk).status == ("APPROVED" if required == 1 else "PLANNED"), where
    assert journal.verify().ok


# --- a revision between a read and a click ----------------------------------------


def previews_ready(workflow_ids, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while Step.objects.filter(workflow_id__in=workflow_ids, lane=0).exclude(preview_state=PreviewState.READY).exists():
        assert time.monotonic() < deadline, "the worker took no previews"
        time.sleep(0.1)


@pytest.mark.parametrize("required", [1, 2])
def test_a_revision_landing_between_a_reviewers_read_and_click(web, people, desk, start_worker, required):
    """A reads revision 1 and approves it while B edits it. Either A's
    approval landed first, and then the plan ran revision 1 (one approval
    needed: B's edit is refused) or B's edit voided it (two needed), or A is
    told the plan is stale and nothing of A's is recorded. A plan never runs
    revision 2 on A's approval of revision 1."""
    policy.update("ticket.create", by="admin", approvals_required=required)
    start_worker()
    rounds = 8
    workflows = [
        submitted(people, f"edit-{required}-{n}", "ticket.create", {"title": f"v1 of {n}"}) for n in range(rounds)
    ]
    previews_ready([w.pk for w in workflows])
    a, b = web["reviewer"], web["reviewer2"]
    runs, outcomes = {}, set()
    for n, workflow in enumerate(workflows):
        seen = a.read(workflow.pk)
        assert seen["revision"] == 1 and set(seen["preview_digests"]) == {"open"}
        calls = (
            partial(a.approve, workflow.pk, seen, comment="v1 looks right"),
            partial(
                b.post,
                f"/workflows/{workflow.pk}/revise",
                {"revision": 1, "steps": [{"key": "open", "args": {"title": f"v2 of {n}"}}]},
            ),
        )
        # The first two rounds one after the other, so that both orders are
        # sure to be seen; the rest at once, or a hair apart.
        (approved, _), (edited, _) = (
            in_turn(calls, [0, 1] if n == 0 else [1, 0]) if n < 2 else at_once(*calls, delays=OFFSETS[n % len(OFFSETS)])
        )
        where = (required, n, approved.text, edited.text)
        fresh = Workflow.objects.get(pk=workflow.pk)
        mine = Approval.objects.filter(workflow=workflow, reviewer__username="reviewer")
        rules = list(policy.policies_for({"ticket.create"}).values())
        if approved.status_code == 200:
            assert list(mine.values_list("revision", flat=True)) == [1], where
            if required == 1:
                # Approved first: the plan left review, and the edit came too late.
                assert edited.status_code == 409 and error_code(edited) == "conflict", where
                assert fresh.revision == 1 and fresh.status != "PLANNED", where
                runs[workflow.pk] = f"v1 of {n}"
                outcomes.add("approved first")
                continue
            # Recorded, then edited: A's approval of revision 1 no longer counts.
            assert edited.status_code == 200 and edited.json()["revision"] == 2, where
            assert fresh.status == "PLANNED" and policy.valid_approvals(fresh, rules) == [], where
            outcomes.add("approved, then edited")
        else:
            assert approved.status_code == 409, where
            refusal = approved.json()["error"]
            assert refusal["code"] == "stale_revision", where
            assert refusal["current"] == {"revision": 2, "plan_hash": fresh.plan_hash}, where
            assert edited.status_code == 200 and not mine.exists(), where
            outcomes.add("edited first")
        assert fresh.revision == 2 and fresh.status == "PLANNED", where
        if required == 2:
            decide.approve(fresh, by=people["admin"])
            # One approval of revision 2 (A's of revision 1 is void): it waits for a second.
            assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED", where
        decide.approve(Workflow.objects.get(pk=workflow.pk), by=people["reviewer"])
        runs[workflow.pk] = f"v2 of {n}"
    expected = {1: {"approved first", "edited first"}, 2: {"approved, then edited", "edited first"}}[required]
    assert outcomes == expected, outcomes
    for workflow_id, title in runs.items():
        wait_for_status(workflow_id, "COMPLETE", timeout=60)
        step = Step.objects.get(workflow_id=workflow_id, key="open")
        (ticket,) = desk.tickets(step.operation_key)
        assert ticket["title"] == title, (workflow_id, ticket)
        final = Workflow.objects.get(pk=workflow_id)
        assert set(step.attempts.values_list("plan_hash", flat=True)) == {final.plan_hash}
        counted = policy.valid_approvals(final, list(policy.policies_for({"ticket.create"}).values()))
        assert len(counted) == required and {approval.revision for approval in counted} == {final.revision}
    assert journal.verify().ok


def in_turn(calls, order) -> list:
    """`at_once`'s answers, the calls made one after the other in `order`."""
    answers = [None] * len(calls)
    for index in order:
        answers[index] = (calls[index](), time.monotonic())
    return answers


# --- a decision while a wait is being set up ----------------------------------------


def test_a_decision_arriving_while_an_agents_wait_is_set_up_answers_the_wait(web, people):
    agent, reviewer = web["agent"], web["reviewer"]
    # The first round's wait finds its web process's watcher stopped (idle
    # this long): the wait starts it, and its LISTEN, as the decision lands.
    time.sleep(waiting.IDLE_SECONDS + 1)
    offsets = [(0, 0), (0, 0.005), (0, 0.01), (0, 0.02), (0, 0.05), (0, 0.1), (0.005, 0), (0.02, 0)]
    for n in range(ROUNDS):
        workflow = submitted(people, f"wait-{n}")
        seen = reviewer.read(workflow.pk)
        (waited, waited_at), (approved, approved_at) = at_once(
            partial(agent.get, f"/workflows/{workflow.pk}/wait", until="decision", timeout=10),
            partial(reviewer.approve, workflow.pk, seen),
            delays=offsets[n % len(offsets)],
        )
        where = (n, waited.text, approved.text)
        assert approved.status_code == 200, where
        assert waited.status_code == 200, where
        assert waited.json()["status"] == "APPROVED" and waited.json()["decision"] == "approved", where
        # Woken by the decision, not read again at the wait's timeout (10 s).
        assert waited_at - approved_at < 3.0, (where, waited_at - approved_at)


# --- a page loaded before someone else decided ---------------------------------------


@pytest.fixture
def consoles(web_server, people):
    web_password(people["reviewer"])
    return {"reviewer": Console(web_server.url, people["reviewer"])}


def test_approving_from_a_page_loaded_before_someone_rejected_is_refused_and_the_reload_shows_it(web, people, consoles):
    page = consoles["reviewer"]
    workflow = submitted(people, "stale-page")
    detail = f"/workflows/{workflow.pk}/"
    loaded = page.page(detail)
    form = decision_form(loaded)
    assert (form["revision"], form["plan_hash"]) == ("1", workflow.plan_hash)

    rejected = web["reviewer2"].reject(workflow.pk, web["reviewer2"].read(workflow.pk), comment="wrong printer")
    assert rejected.status_code == 200, rejected.text
    answer = page.submit(loaded, f"/workflows/{workflow.pk}/approve", comment="looks fine")

    assert answer.status_code == 200 and answer.url.endswith(detail)
    assert "The workflow is REJECTED, not awaiting an approval." in answer.text
    assert status_shown(answer.text) == "REJECTED" and decision_form(answer.text) is None
    assert approvers(workflow.pk) == [] and Workflow.objects.get(pk=workflow.pk).status == "REJECTED"
    assert [(actor, verb) for actor, verb, _ in decisions(workflow.pk)] == [("reviewer2", "workflow.rejected")]
    reloaded = page.page(detail)
    assert status_shown(reloaded) == "REJECTED" and decision_form(reloaded) is None


def test_a_console_approval_and_an_api_rejection_at_once_record_one_decision(web, people, consoles):
    page, rejecter = consoles["reviewer"], web["reviewer2"]
    rounds = 8
    for n in range(rounds):
        workflow = submitted(people, f"page-vs-api-{n}")
        detail = f"/workflows/{workflow.pk}/"
        loaded, seen = page.page(detail), rejecter.read(workflow.pk)
        (clicked, _), (rejected, _) = at_once(
            partial(page.submit, loaded, f"/workflows/{workflow.pk}/approve"),
            partial(rejecter.reject, workflow.pk, seen, comment="no"),
            delays=OFFSETS[n % len(OFFSETS)],
        )
        where = (n, rejected.text)
        status = Workflow.objects.get(pk=workflow.pk).status
        events = [(actor, verb) for actor, verb, _ in decisions(workflow.pk)]
        assert Approval.objects.filter(workflow=workflow).count() == 1, where
        if rejected.status_code == 200:
            assert status == "REJECTED" and approvers(workflow.pk) == [], where
            assert events == [("reviewer2", "workflow.rejected")], where
            assert "The workflow is REJECTED, not awaiting an approval." in clicked.text, where
        else:
            assert rejected.status_code == 409 and error_code(rejected) == "conflict", where
            assert status == "APPROVED" and approvers(workflow.pk) == ["reviewer"], where
            assert events == [("reviewer", "workflow.approved")], where
        for shown in (clicked.text, page.page(detail)):
            assert status_shown(shown) == status and decision_form(shown) is None, where
    assert journal.verify().ok


# --- a retry after a crash --------------------------------------------------------


CRASH_ENV = {
    "STEP_LEASE_SECONDS": "3",
    "RETRY_BASE_SECONDS": "0.05",
    "RETRY_CAP_SECONDS": "0.2",
    "ACTION_TIMEOUT_SECONDS": "6",
    "RECONCILE_GRACE_SECONDS": "0.5",
}
KEPT = ("number", "operation_key", "fence", "worker", "started_at", "plan_hash", "proof_jti", "policy_version")


def test_a_retry_after_a_worker_was_killed_mid_effect_keeps_the_first_attempts_record(people, desk, start_worker):
    # The desk holds the first create for 5 s, then refuses it: the request
    # is in flight when its worker dies, and it takes no effect.
    desk.fault(mode="latency", ms=5000, count=1)
    desk.fault(mode="error", status=503, count=1)
    workflow = decide.approve(
        submitted(people, "killed", "ticket.create", {"title": "Printer on fire"}), by=people["reviewer"]
    )
    doomed = start_worker(name="doomed", **CRASH_ENV)
    deadline = time.monotonic() + 30
    while not desk.concurrency()["in_flight"].get("POST /tickets"):
        assert time.monotonic() < deadline, f"the create never reached the desk:\n{doomed.log()}"
        time.sleep(0.02)
    cluster = processes.group_pids(doomed.process.pid)
    doomed.kill()  # SIGKILL to its whole process group, mid-request

    (first,) = Attempt.objects.filter(step__workflow=workflow)
    before = {name: getattr(first, name) for name in KEPT}
    assert first.number == 1 and first.status == "REQUESTED" and first.finished_at is None
    assert processes.owner_pid(first.worker) in cluster and processes.gone(cluster, timeout=10)
    assert desk.concurrency()["in_flight"].get("POST /tickets") == 1  # still at the desk when its worker died
    while desk.concurrency()["in_flight"].get("POST /tickets"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert desk.faults() == [] and desk.tickets() == []  # refused: the dead worker's request took no effect

    start_worker(name="restarted", **CRASH_ENV)
    wait_for_status(workflow.pk, "COMPLETE", timeout=60)

    first.refresh_from_db()
    assert {name: getattr(first, name) for name in KEPT} == before
    assert first.status == "RECONCILED" and first.finished_at is not None
    second = Attempt.objects.get(step__workflow=workflow, number=2)
    assert second.status == "SUCCEEDED" and second.worker != first.worker and second.started_at > first.started_at
    assert Attempt.objects.filter(step__workflow=workflow).count() == 2
    trail = list(
        AuditEvent.objects.filter(workflow_id=workflow.pk, object_type="attempt")
        .order_by("id")
        .values_list("object_id", "verb", "data")
    )
    assert [(obj, verb) for obj, verb, _ in trail] == [
        (str(first.pk), "attempt.requested"),
        (str(first.pk), "attempt.reconciled"),
        (str(second.pk), "attempt.requested"),
        (str(second.pk), "attempt.succeeded"),
    ]
    assert trail[0][2]["number"] == 1 and trail[1][2]["found"] is False and trail[2][2]["number"] == 2
    step = Step.objects.get(workflow=workflow)
    assert len(desk.tickets(step.operation_key)) == 1 and len(desk.ledger()) == 1
    assert journal.verify().ok
