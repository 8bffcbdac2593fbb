"""`{"$from": "<step key>.result.<field>"}`: arguments taken from an earlier
step's recorded result, resolved when the step runs (DESIGN §12)."""

from workflows import actions
from workflows.actions import ActionError
from workflows.models import Step
from workflows.states import FailureClass, StepStatus


def resolve_args(step: Step) -> dict:
    """Replace {"$from": "<step>.result.<field>"} with the value recorded by
    that earlier step. A missing value is the plan's fault: INVALID_ARGUMENTS."""
    results = None

    def lookup(ref: str):
        nonlocal results
        if results is None:
            results = {
                key: result
                for key, result in Step.objects.filter(
                    workflow_id=step.workflow_id, position__lt=step.position, status=StepStatus.COMPLETE
                ).values_list("key", "result")
            }
        step_key, _, path = ref.partition(".result.")
        value = results.get(step_key)
        for part in path.split(".") if path else []:
            if not isinstance(value, dict) or part not in value:
                raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
            value = value[part]
        if value is None:
            raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
        return value

    def walk(value):
        if actions.is_reference(value):
            return lookup(value[actions.FROM])
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(step.args)
