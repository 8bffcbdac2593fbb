"""Property tests: random sequences of operations never make a move the
transition table forbids and never repeat an effect; generated secrets never
survive redaction, and what is not secret does."""

from collections import Counter
from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.support import deciding as decide
from workflows import actions, states
from workflows.actions import ActionError, Outcome
from workflows.audit import journal, redaction
from workflows.engine import execution, leases, recovery
from workflows.errors import DomainError
from workflows.models import Attempt, AuditEvent, DeadLetter, Step, Workflow
from workflows.operations import deadletters, plans

PERFORMED: dict[str, int] = {}
FAULTS: list[str] = []
# What the runs did, over all examples: a machine that never performed,
# crashed or replayed anything would check nothing.
SEEN: Counter = Counter()
# The status each kind of row is created in (no audit event moves it there).
CREATED = {
    "workflow": states.WorkflowStatus.PLANNED,
    "step": states.StepStatus.PENDING,
    "attempt": states.AttemptStatus.REQUESTED,
}


@actions.register
class Counted(actions.Action):
    """Counts every call per operation key, and never deduplicates: a repeat
    by the engine would show as a count of two."""

    name = "test.counted"
    idempotent = False
    can_lookup = True
    compensation = None

    def perform(self, args, operation_key):
        fault = FAULTS.pop(0) if FAULTS else None
        if fault == "transient":
            raise ActionError(states.FailureClass.TRANSIENT, "injected 503")
        if fault == "invalid":
            raise ActionError(states.FailureClass.INVALID_ARGUMENTS, "injected 400")
        PERFORMED[operation_key] = PERFORMED.get(operation_key, 0) + 1
        if fault == "lost_answer":
            raise ActionError(states.FailureClass.TIMEOUT, "injected timeout after the effect", outcome_unknown=True)
        return Outcome(result={"n": PERFORMED[operation_key]}, external_ref=f"count:{operation_key}")

    def lookup(self, operation_key):
        return Outcome(result={"n": PERFORMED[operation_key]}) if PERFORMED.get(operation_key) else None


class Operations(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        PERFORMED.clear()
        FAULTS.clear()
        self.savepoint = transaction.savepoint()
        self.workflows = []

    @initialize()
    def people(self):
        from django.contrib.auth.models import Group, User

        self.agent = User.objects.get_or_create(username="prop-agent")[0]
        self.reviewer = User.objects.get_or_create(username="prop-reviewer")[0]
        self.operator = User.objects.get_or_create(username="prop-operator")[0]
        self.reviewer.groups.add(Group.objects.get_or_create(name="reviewers")[0])
        self.operator.groups.add(Group.objects.get_or_create(name="operators")[0])

    @rule(steps=st.integers(min_value=1, max_value=3))
    def submit(self, steps):
        body = {
            "name": "p",
            "submission_key": f"p{len(self.workflows)}",
            "steps": [{"key": f"s{i}", "action": "test.counted", "args": {}} for i in range(steps)],
        }
        self.workflows.append(plans.submit(self.agent, body).workflow.pk)

    @rule(steps=st.integers(min_value=1, max_value=3))
    def submit_approved(self, steps):
        self.submit(steps)
        decide.approve(Workflow.objects.get(pk=self.workflows[-1]), by=self.reviewer)

    @precondition(lambda self: self.workflows)
    @rule(data=st.data(), decision=st.sampled_from(["approve", "reject"]))
    def decide(self, data, decision):
        workflow = Workflow.objects.get(pk=data.draw(st.sampled_from(self.workflows)))
        try:
            getattr(decide, decision)(workflow, by=self.reviewer)
        except DomainError:
            pass  # a refused decision is a legal outcome; the invariants check the rest

    @rule(fault=st.sampled_from(["transient", "invalid", "lost_answer"]))
    def inject(self, fault):
        FAULTS.append(fault)

    @rule()
    def run(self):
        execution.drain(budget_seconds=2)

    @rule()
    def crash_mid_step(self):
        """A worker claims a step, commits REQUESTED, then vanishes."""
        step = execution.claim()
        if step is not None:
            try:
                execution._request_attempt(step, step.fence)
            except leases.LeaseLost:
                return
            recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
            SEEN["crashes"] += 1

    @rule()
    def replay(self):
        # No precondition on the database: what is open depends on timing
        # (retry and in-flight windows), and hypothesis needs the same rules
        # enabled whenever it replays the same choices.
        dead_letter = DeadLetter.objects.open().first()
        if dead_letter is None:
            return
        try:
            deadletters.replay(dead_letter, by=self.operator, reason="property test")
            SEEN["replays"] += 1
        except DomainError:
            pass

    @rule()
    def fail_for_good_then_replay(self):
        """A step refused by the remote system for good, replayed by an
        operator at once (alone, `replay` rarely finds an open dead letter)."""
        self.submit_approved(1)
        FAULTS.append("invalid")
        self.run()
        self.replay()

    @invariant()
    def every_move_is_one_the_table_allows(self):
        """Read from the audit trail, each row's moves in order: every one an
        edge of the table, each starting where the last one ended (from the
        status the row was created in), the last ending at its status now."""
        now = {("workflow", str(pk)): status for pk, status in Workflow.objects.values_list("pk", "status")}
        now |= {("step", str(pk)): status for pk, status in Step.objects.values_list("pk", "status")}
        now |= {("attempt", str(pk)): status for pk, status in Attempt.objects.values_list("pk", "status")}
        reached = {}
        moves = AuditEvent.objects.filter(object_type__in=CREATED, data__has_keys=["from", "to"]).order_by("id")
        for kind, obj_id, data in moves.values_list("object_type", "object_id", "data"):
            key, was, to = (kind, obj_id), data["from"], data["to"]
            assert states.allowed(kind, was, to), f"{kind} {obj_id} moved {was} -> {to}"
            assert reached.get(key, CREATED[kind]) == was, f"{kind} {obj_id} moved from {was}, was {reached.get(key)}"
            reached[key] = to
        for key, status in now.items():
            assert reached.get(key, CREATED[key[0]]) == status, f"{key} is {status} without a move to it"

    @invariant()
    def statuses_are_known_and_consistent(self):
        for (status,) in Workflow.objects.values_list("status"):
            assert status in states.WorkflowStatus.values
        for workflow in Workflow.objects.filter(status="COMPLETE"):
            assert not workflow.steps.filter(lane=0).exclude(status="COMPLETE").exists()
        for (status,) in Step.objects.values_list("status"):
            assert status in states.StepStatus.values
        for (status,) in Attempt.objects.values_list("status"):
            assert status in states.AttemptStatus.values

    @invariant()
    def no_effect_twice(self):
        assert all(count == 1 for count in PERFORMED.values()), PERFORMED

    @invariant()
    def every_effect_had_a_requested_attempt(self):
        for key in PERFORMED:
            assert Attempt.objects.filter(operation_key=key).exists()

    def teardown(self):
        try:
            assert journal.verify().ok
            SEEN["effects"] += len(PERFORMED)
            SEEN["settled by lookup"] += Attempt.objects.filter(status=states.AttemptStatus.RECONCILED).count()
            SEEN["moves"] += AuditEvent.objects.filter(data__has_keys=["from", "to"]).count()
        finally:
            transaction.savepoint_rollback(self.savepoint)


def test_random_operations_never_break_the_rules(db, settings, monkeypatch):
    settings.ACTION_TIMEOUT_SECONDS = 0.01
    settings.RECONCILE_GRACE_SECONDS = 0.0
    from workflows.engine import retry

    monkeypatch.setattr(retry, "BASE_SECONDS", 0.0)
    monkeypatch.setattr(retry, "CAP_SECONDS", 0.0)
    SEEN.clear()
    run_state_machine_as_test(Operations, settings=settings_for_machine())
    # The rules were exercised, not only stated: effects ran, workers crashed
    # mid-step, lost answers were settled by lookup, dead letters replayed.
    assert all(SEEN[name] > 0 for name in ("effects", "crashes", "settled by lookup", "replays", "moves")), SEEN


def settings_for_machine():
    return settings(
        max_examples=40,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


SECRET_KEYS = st.sampled_from(
    [
        "password",
        "api_key",
        "Authorization",
        "client_secret",
        "token",
        "x-api-key",
        "private_key",
        "sessionid",
        "apiKey",
    ]
)
SECRETS = st.text(alphabet=st.characters(min_codepoint=48, max_codepoint=122), min_size=12, max_size=40).filter(
    lambda s: s.strip() and not s.isdigit()
)


@given(key=SECRET_KEYS, secret=SECRETS, nest=st.integers(min_value=0, max_value=4))
@settings(max_examples=200)
def test_secrets_under_secret_keys_never_survive(key, secret, nest):
    assume(secret not in key)  # the key itself is kept
    value = {key: secret, "note": "kept"}
    for _ in range(nest):
        value = {"outer": [value, {"other": "kept"}]}
    redacted = redaction.redact(value)
    assert secret not in repr(redacted)
    # Only the secret went: the key that named it, the shape and every other value stay.
    inner = redacted
    for _ in range(nest):
        assert inner["outer"][1] == {"other": "kept"}
        inner = inner["outer"][0]
    assert set(inner) == {key, "note"} and inner["note"] == "kept"


# Credential-looking: letters and digits in turn, as keys and their encodings are.
CREDENTIALS = (
    st.lists(
        st.tuples(
            st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_."), st.sampled_from("0123456789")
        ),
        min_size=6,
        max_size=30,
    )
    .map(lambda pairs: "".join(a + b for a, b in pairs))
    .filter(lambda s: sum(c.isalpha() for c in s) >= 2)
)


@given(
    scheme=st.sampled_from(["Bearer ", "Basic ", "token "]),
    secret=CREDENTIALS,
    before=st.text(max_size=30),
    after=st.text(max_size=30),
)
@settings(max_examples=200)
def test_credentials_inside_free_text_never_survive(scheme, secret, before, after):
    text = f"{before} Authorization: {scheme}{secret} {after}"
    redacted = redaction.redact_text(text)
    assert f"{scheme}{secret}" not in redacted and secret not in redacted
    assert redaction.redact({"note": text})["note"] == redacted
    assert "Authorization:" in redacted and redaction.REDACTED in redacted  # the text says what was taken out


@given(prompt=st.text(min_size=redaction.PROMPT_LIMIT + 1, max_size=3000))
@settings(max_examples=50)
def test_long_prompts_never_survive_in_context(prompt):
    redacted = redaction.redact({"anything": prompt}, prompts=True)
    assert prompt not in repr(redacted)
    assert redacted["anything"].startswith(f"[REDACTED {len(prompt)} chars sha256:")
    # Up to the limit, a value is kept as any text is.
    short = prompt[: redaction.PROMPT_LIMIT]
    assert redaction.redact({"anything": short}, prompts=True)["anything"] == redaction.redact_text(short)
