"""Limits per action (docs/explanation/concurrency.md#effects-in-flight): claims never exceed an action's
`max_in_flight` or its rate, cluster-wide; a saturated action never keeps
others from being claimed; a remote's RATE_LIMITED answer pauses its action
for every step; replays obey the same limits."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.running import run_until
from workflows.engine import execution, limits, policy
from workflows.engine.transitions import move
from workflows.models import ActionThrottle, Attempt, AuditEvent, DeadLetter, Step
from workflows.operations import deadletters, plans
from workflows.states import StepStatus

ARGS = {"ticket.create": {"title": "t", "body": "b"}, "noop": {}}


def approved(people, action, n, prefix=None, args=None):
    """`n` approved one-step plans of `action`, ready in this order."""
    workflows = []
    for i in range(n):
        body = {
            "name": f"{action} {i}",
            "submission_key": f"{prefix or action}-{i}",
            "steps": [{"key": "only", "action": action, "args": args or ARGS[action]}],
        }
        workflow = plans.submit(people["agent"], body).workflow
        decide.approve(workflow, by=people["reviewer"])
        workflows.append(workflow)
    return workflows


def running(action) -> int:
    return Step.objects.filter(action=action, status=StepStatus.RUNNING).count()


def release(steps) -> None:
    """Put claimed steps back in line, as recovery does after a lost worker."""
    with transaction.atomic():
        for step in steps:
            move(
                step,
                StepStatus.WAITING_RETRY,
                actor="test",
                guard={"fence": step.fence},
                next_attempt_at=timezone.now(),
                lease_expires_at=None,
            )


def test_claims_never_exceed_max_in_flight(people, desk):
    approved(people, "ticket.create", 5)
    policy.update("ticket.create", by="test", max_in_flight=2)
    first = execution.claim_batch()
    assert [s.action for s in first] == ["ticket.create"] * 2
    assert running("ticket.create") == 2
    assert execution.claim_batch() == []
    assert "ticket.create" in limits.held_back()
    execution.run_batch(first)  # two effects finish: room for two more
    assert len(desk.tickets()) == 2
    assert len(execution.claim_batch()) == 2
    assert running("ticket.create") == 2


def test_the_bucket_admits_no_more_than_its_rate(people):
    approved(people, "noop", 5)
    policy.update("noop", by="test", rate_per_second=2)
    steps = list(Step.objects.filter(action="noop").order_by("pk"))
    t0 = timezone.now()
    taken = []
    for offset in (0, 0, 0.5, 0.6, 60):
        with transaction.atomic():
            taken.append(len(limits.admit(steps, now=t0 + timedelta(seconds=offset))))
    # A full bucket holds one second of tokens; then one token per half second.
    assert taken == [2, 0, 1, 0, 2]
    assert "noop" in limits.held_back(now=t0 + timedelta(seconds=60))
    assert "noop" not in limits.held_back(now=t0 + timedelta(seconds=61))


def test_unlimited_actions_are_admitted_without_a_query(people, django_assert_num_queries):
    approved(people, "noop", 3)
    steps = list(Step.objects.filter(action="noop"))
    held = limits.held_back()
    with django_assert_num_queries(0):
        assert limits.admit(steps, held) == steps


def test_a_saturated_action_is_left_out_before_the_window_so_others_are_claimed(people, desk):
    approved(people, "ticket.create", 12)  # ready first
    approved(people, "noop", 3)
    policy.update("ticket.create", by="test", max_in_flight=1)
    first = execution.claim_batch(limit=2)
    assert [s.action for s in first] == ["ticket.create"]
    # The window of the next claim (8 steps) would hold only ticket steps,
    # were the saturated action not left out before it was taken.
    second = execution.claim_batch(limit=2)
    assert [s.action for s in second] == ["noop", "noop"]
    assert running("ticket.create") == 1


def _claim_concurrently(threads: int, rounds: int, action: str, most: int | None):
    """Claimers on their own connections, all at once; each checks after its
    commit that the action's in-flight steps stay within `most`, then puts
    what it claimed back in line."""
    barrier = threading.Barrier(threads)
    seen, errors, claims = [], [], []

    def claimer():
        try:
            barrier.wait()
            for _ in range(rounds):
                got = [s for s in execution.claim_batch(limit=4, share=False) if s.action == action]
                claims.append(len(got))
                seen.append(running(action))
                release(got)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=claimer) for _ in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return seen, errors, claims, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_many_claimers_at_once_never_exceed_max_in_flight(people):
    approved(people, "ticket.create", 24)
    policy.update("ticket.create", by="test", max_in_flight=3)
    seen, errors, claims, _ = _claim_concurrently(8, 10, "ticket.create", 3)
    assert errors == []
    assert max(seen) == 3  # the limit was reached, and never passed
    assert sum(claims) >= 10


@pytest.mark.django_db(transaction=True)
def test_many_claimers_at_once_never_exceed_the_rate(people):
    approved(people, "ticket.create", 24)
    policy.update("ticket.create", by="test", rate_per_second=5)
    seen, errors, claims, elapsed = _claim_concurrently(8, 25, "ticket.create", None)
    assert errors == []
    # A full bucket (one second's worth), then the rate: never more.
    assert 5 <= sum(claims) <= 5 + 5 * elapsed + 1
    assert max(claims) <= 4


def test_a_rate_limited_answer_from_the_desk_pauses_the_action_for_other_steps(people, desk):
    first, other = approved(people, "ticket.create", 2)
    (noop,) = approved(people, "noop", 1)
    desk.fault(mode="rate_limit", retry_after=30, count=1)
    execution.execute(execution.claim(first.pk))
    assert desk.faults() == []  # the 429 was served
    attempt = Attempt.objects.get(step__workflow=first)
    assert attempt.failure_class == "RATE_LIMITED"
    paused_until = limits.state("ticket.create")["paused_until"]
    assert paused_until > timezone.now() + timedelta(seconds=25)
    assert "ticket.create" in limits.held_back()
    claimed = execution.claim_batch()
    assert [s.workflow_id for s in claimed] == [noop.pk]  # the other ticket step waits
    assert other.steps.get().status == "PENDING"
    assert desk.tickets() == []
    paused = AuditEvent.objects.filter(verb="action.paused")
    assert [e.data["action"] for e in paused] == ["ticket.create"]


def test_a_pause_is_only_extended_and_audited_once(db):
    now = timezone.now()
    with transaction.atomic():
        until = limits.note_rate_limited("ticket.create", 10, now)
        assert limits.note_rate_limited("ticket.create", 2, now) == until
        longer = limits.note_rate_limited("ticket.create", 20, now)
    assert longer == now + timedelta(seconds=20)
    assert ActionThrottle.objects.get(action="ticket.create").paused_until == longer
    assert AuditEvent.objects.filter(verb="action.paused").count() == 1


def test_a_pause_without_retry_after_is_short_and_a_huge_one_is_bounded(db):
    now = timezone.now()
    with transaction.atomic():
        assert limits.note_rate_limited("a", None, now) == now + timedelta(seconds=limits.DEFAULT_PAUSE_SECONDS)
        assert limits.note_rate_limited("b", 1e15, now) == now + timedelta(seconds=limits.LONGEST_PAUSE_SECONDS)


def test_replay_and_bulk_replay_obey_the_limits(people, desk):
    ticket = desk.request("POST", "/tickets", json={"title": "t"}).json()["id"]
    workflows = approved(people, "ticket.comment", 3, args={"ticket_id": ticket, "body": "hi"})
    desk.fault(mode="error", status=404, count=3)  # the ticket is gone by the time they run
    for workflow in workflows:
        run_until(workflow.pk, "FAILED")
    assert DeadLetter.objects.open().count() == 3
    policy.update("ticket.comment", by="test", max_in_flight=1)
    one = DeadLetter.objects.open().first()
    deadletters.replay(one, by=people["operator"], reason="ticket restored")
    done, refused = deadletters.replay_many(
        deadletters.select(action="ticket.comment"), by=people["operator"], reason="tickets restored"
    )
    assert (len(done), refused) == (2, [])
    assert Step.objects.filter(action="ticket.comment", status="PENDING").count() == 3
    assert [s.action for s in execution.claim_batch()] == ["ticket.comment"]
    assert execution.claim_batch() == []
    assert running("ticket.comment") == 1
