"""References in args, resolved when the step runs and only then:
`{"$from": "<step key>.result.<field>"}` takes a value from an earlier
step's recorded result (docs/reference/http-api.md#http-api); `{"$decision": "<gate key>.input.<field>"}`
takes a typed gate's input (docs/explanation/review.md#typed-decisions); `{"$secret": "NAME"}` takes a secret
from the worker's environment (docs/explanation/trust-core.md#secrets-by-reference, `workflows.secrets`)."""

from workflows import actions
from workflows.actions import ActionError
from workflows.actions.args import DECISION, is_decision
from workflows.audit import secrets
from workflows.audit.redaction import was_redacted
from workflows.db import canonical_json, sha256_hex
from workflows.engine import choices
from workflows.models import Step
from workflows.states import FailureClass, StepStatus


def _from_references(value):
    if actions.is_reference(value):
        yield value[actions.FROM]
    elif isinstance(value, dict):
        for item in value.values():
            yield from _from_references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _from_references(item)


class _Results:
    """The recorded results of a step's earlier steps, read once when needed."""

    def __init__(self, step: Step):
        self.step = step
        self.results = None

    def lookup(self, ref: str):
        """The value a $from reference names. A missing value is the plan's
        fault: INVALID_ARGUMENTS."""
        if self.results is None:
            self.results = dict(
                Step.objects.filter(
                    workflow_id=self.step.workflow_id, position__lt=self.step.position, status=StepStatus.COMPLETE
                ).values_list("key", "result")
            )
        step_key, _, path = ref.partition(".result.")
        value = self.results.get(step_key)
        for part in path.split(".") if path else []:
            if not isinstance(value, dict) or part not in value:
                raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
            value = value[part]
        if value is None:
            raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
        return value


def problems(step: Step) -> list[str]:
    """Why this step must not run at all (it is BLOCKED, POLICY_FAILED,
    before any attempt): a secret the current SECRETS_POLICY does not let go
    where the step sends it, or a $from reference to a value that redaction
    changed, which would send `[REDACTED]` instead of what the plan meant."""
    found = []
    if secrets.check(step.args, actions.find(step.action), "args"):
        found.append(secrets.NOT_ALLOWED)
    refs = list(_from_references(step.args))
    if refs:
        results = _Results(step)
        for ref in refs:
            try:
                value = results.lookup(ref)
            except ActionError:
                continue  # a missing value fails the attempt, as it always did
            if was_redacted(value):
                found.append(f"reference {ref!r} points at a value that was redacted when it was recorded")
    return found


def resolve_args(step: Step) -> dict:
    """The step's args with every reference replaced by its value. A missing
    secret fails the attempt (PERMISSION_DENIED) with a message that names
    the secret, never a value."""
    return resolve(step)[0]


def resolve(step: Step) -> tuple[dict, str]:
    """`resolve_args`, and the SHA-256 of the canonical args with their
    `$from` references resolved and their secrets left as references: what
    the approval proof's `args_sha256` binds, with no secret in it."""
    results = _Results(step)
    decisions = choices.Decisions(step)

    def walk(value, reveal: bool):
        if actions.is_reference(value):
            return results.lookup(value[actions.FROM])
        if is_decision(value):
            return decisions.lookup(value[DECISION])
        if secrets.is_reference(value):
            if not reveal:
                return value
            try:
                return secrets.value_of(value[secrets.SECRET])
            except secrets.SecretUnavailable as exc:
                raise ActionError(FailureClass.PERMISSION_DENIED, str(exc)) from None
        if isinstance(value, dict):
            return {k: walk(v, reveal) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, reveal) for v in value]
        return value

    args = walk(step.args, True)
    return args, sha256_hex(canonical_json(walk(step.args, False)))


def readers_of(step: Step) -> list[str]:
    """The keys of the later steps of its lane whose args take a value from
    this step's result by `$from`."""
    later = Step.objects.filter(workflow_id=step.workflow_id, lane=step.lane, position__gt=step.position)
    return [
        key
        for key, args in later.order_by("position").values_list("key", "args")
        if any(ref.partition(".result.")[0] == step.key for ref in _from_references(args))
    ]
