"""Several plans decided at once (`approvals.decide_each`,
docs/guides/reviewers.md#deciding-several-plans-at-once): each by its own
approve or reject, in its own transaction, so one refused never undoes
another and one refused changes nothing; each approval is its own record,
its own audit event and, once the plan runs, its own approval proof."""

from datetime import UTC

import pytest

from durableconsole import proof
from tests.support import seeing
from tests.support.receiver import Receiver
from tests.support.running import run_until
from workflows.audit import signing
from workflows.errors import DomainError, WrongState
from workflows.models import Approval, AuditEvent, Workflow
from workflows.operations import approvals, plans
from workflows.operations.approvals import Decision
from workflows.operations.deciding import Seen

NOOP = {"steps": [{"key": "a", "action": "noop", "args": {}}]}


def submitted(people, key, plan=NOOP):
    workflow = plans.submit(people["agent"], {**plan, "name": key, "submission_key": key}).workflow
    seeing.previews_taken(workflow.pk)
    return workflow


def approving(*workflows):
    return [Decision(w.pk, "approve", Seen.current(w), f"ok {w.name}") for w in workflows]


def test_a_decision_that_fails_midway_changes_nothing_and_undoes_no_other(people, monkeypatch):
    first, failing, last = (submitted(people, key) for key in ("first", "failing", "last"))
    real_move, faults = approvals.move, []

    def move(obj, *args, **kwargs):
        # After the failing plan's approval row is written, inside its transaction.
        if obj.pk == failing.pk:
            faults.append(obj.pk)
            raise WrongState("injected: the status move failed")
        return real_move(obj, *args, **kwargs)

    monkeypatch.setattr(approvals, "move", move)
    outcomes = approvals.decide_each(approving(first, failing, last), by=people["reviewer"])

    assert faults == [failing.pk]
    assert [None if o is None else o.message for o in outcomes] == [None, "injected: the status move failed", None]
    statuses = dict(Workflow.objects.values_list("pk", "status"))
    assert (statuses[first.pk], statuses[failing.pk], statuses[last.pk]) == ("APPROVED", "PLANNED", "APPROVED")
    assert set(Approval.objects.values_list("workflow_id", flat=True)) == {first.pk, last.pk}
    events = AuditEvent.objects.filter(verb="workflow.approved")
    assert sorted((str(e.workflow_id), e.data["comment"]) for e in events) == sorted(
        [(str(first.pk), "ok first"), (str(last.pk), "ok last")]
    )
    assert not AuditEvent.objects.filter(workflow_id=failing.pk).exclude(verb="workflow.submitted").exists()


@pytest.mark.parametrize("count", [0, approvals.MAX_AT_ONCE + 1])
def test_none_or_too_many_is_refused_whole_before_anything_is_decided(people, count):
    workflows = [submitted(people, f"n{n}") for n in range(count)]
    with pytest.raises(DomainError) as refused:
        approvals.decide_each(approving(*workflows), by=people["reviewer"])
    assert refused.value.status == 400 and refused.value.fields == {"decisions": "From 1 to 100 decisions."}
    assert not Approval.objects.exists()


def test_a_plan_named_twice_is_refused_whole(people):
    once, twice = submitted(people, "once"), submitted(people, "twice")
    decisions = approving(twice, once) + [Decision(twice.pk, "reject", Seen.current(twice))]
    with pytest.raises(DomainError) as refused:
        approvals.decide_each(decisions, by=people["reviewer"])
    assert set(refused.value.fields) == {"decisions.2.workflow"}
    assert not Approval.objects.exists()


def _at(moment) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_each_approval_is_its_own_proof_naming_its_own_plan_and_approval(people):
    with Receiver() as receiver:
        url = f"{receiver.url}/hooks/deploy"
        workflows = [
            submitted(
                people,
                f"hook-{n}",
                {"steps": [{"key": "notify", "action": "http.post", "args": {"url": url, "json": {"n": n}}}]},
            )
            for n in range(2)
        ]
        assert approvals.decide_each(approving(*workflows), by=people["reviewer"]) == [None, None]
        for workflow in workflows:
            run_until(workflow.pk, "COMPLETE")
        got = list(receiver.requests)
    assert len(got) == 2
    claims = [
        proof.verify(
            request["headers"]["approval-proof"],
            method="POST",
            url=url,
            body=request["body"],
            idempotency_key=request["headers"]["idempotency-key"],
            jwks=signing.jwks(),
            audience=proof.origin(receiver.url),
        )
        for request in got
    ]
    by_plan = {c["wf"]: c for c in claims}
    assert set(by_plan) == {str(w.pk) for w in workflows}
    for workflow in workflows:
        approval = Approval.objects.get(workflow=workflow)
        assert by_plan[str(workflow.pk)]["approvers"] == [
            {"sub": str(people["reviewer"].pk), "at": _at(approval.created_at)}
        ]
        assert by_plan[str(workflow.pk)]["plan_hash"] == workflow.plan_hash
    assert len({c["jti"] for c in claims}) == 2
