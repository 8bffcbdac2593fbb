"""Typed decisions at gates (docs/explanation/review.md#typed-decisions).

A gate may offer `options` (its approvers choose one) and ask for `input`
against a JSON Schema (`input_schema`; the first approver gives it, the
others approve that input, so such a gate needs two approvals at least). A
later step with `"when": {"gate": key, "choice": option}` runs only on that
choice, else ends SKIPPED; args take the input by `{"$decision": "<gate
key>.input.<field>"}`, resolved when the step runs, as `$from` is.

What a gate decided is kept on its step when it opens (`Step.gate_decision`)
and bound into every later approval proof (`decisions_sha256`).
"""

from __future__ import annotations

from jsonschema import Draft202012Validator, SchemaError

from workflows.actions import ActionError
from workflows.actions.args import DECISION
from workflows.db import canonical_json, sha256_hex
from workflows.models import Step
from workflows.states import FailureClass

MAX_OPTIONS = 20
MAX_OPTION_CHARACTERS = 200
MAX_SCHEMA_CHARACTERS = 10_000
MAX_INPUT_CHARACTERS = 10_000


def typed(gate) -> bool:
    """The gate asks for a choice or an input."""
    return isinstance(gate, dict) and ("options" in gate or "input_schema" in gate)


def gate_errors(gate: dict, where: str) -> dict[str, str]:
    """The typed part of a gate definition: distinct non-empty options, a
    valid JSON Schema of bounded size, and two approvals at least when it
    asks for input (another person approves what the first gave)."""
    errors = {}
    if "options" in gate:
        options = gate["options"]
        if (
            not isinstance(options, list)
            or not 2 <= len(options) <= MAX_OPTIONS
            or any(not isinstance(o, str) or not o.strip() or len(o) > MAX_OPTION_CHARACTERS for o in options)
        ):
            errors[f"{where}.options"] = (
                f"A list of 2 to {MAX_OPTIONS} options, each non-empty text of at most {MAX_OPTION_CHARACTERS} "
                "characters."
            )
        elif len(set(options)) != len(options):
            errors[f"{where}.options"] = "Each option once."
    if "input_schema" in gate:
        schema = gate["input_schema"]
        if not isinstance(schema, dict) or schema.get("type") != "object":
            errors[f"{where}.input_schema"] = 'A JSON Schema of an object: {"type": "object", "properties": ...}.'
        elif len(canonical_json(schema)) > MAX_SCHEMA_CHARACTERS:
            errors[f"{where}.input_schema"] = f"At most {MAX_SCHEMA_CHARACTERS} characters of JSON."
        else:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                errors[f"{where}.input_schema"] = f"Not a valid JSON Schema: {exc.message}"
        approvals = gate.get("approvals")
        if type(approvals) is int and approvals < 2:
            errors.setdefault(
                f"{where}.approvals",
                "A gate that asks for input needs at least 2 approvals: one person gives it, another approves it.",
            )
    return errors


def fields_of(gate: dict) -> set[str] | None:
    """The input fields a `$decision` may name, when the schema says which
    (its `properties`, with `additionalProperties: false`); None: any."""
    schema = gate.get("input_schema") or {}
    properties = schema.get("properties")
    if isinstance(properties, dict) and schema.get("additionalProperties") is False:
        return set(properties)
    return None


def when_errors(when, gates: dict[str, dict], where: str) -> dict[str, str]:
    """`{"gate": key, "choice": option}` naming an earlier gate (`gates`:
    the earlier steps' gates by key) and one of its options."""
    if not isinstance(when, dict) or set(when) != {"gate", "choice"}:
        return {where: 'A condition is {"gate": "<earlier gate step key>", "choice": "<one of its options>"}.'}
    gate = gates.get(when["gate"]) if isinstance(when["gate"], str) else None
    if gate is None:
        return {f"{where}.gate": "The key of an earlier step that carries a gate."}
    if not isinstance(gate.get("options"), list) or when["choice"] not in gate["options"]:
        return {f"{where}.choice": "One of that gate's options."}
    return {}


def decision_references(value, path: str):
    """Each `$decision` reference in args, with its dotted path."""
    if isinstance(value, dict) and set(value) == {DECISION}:
        yield path, value[DECISION]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from decision_references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from decision_references(item, f"{path}.{index}")


OTHER_BRANCH = (
    "That step runs only on one choice of its gate (its `when`): a step that reads it must carry the same `when`."
)


def reference_errors(
    args, gates: dict[str, dict], where: str, branches: dict[str, dict] | None = None, when=None
) -> dict[str, str]:
    """Each `$decision` must name an earlier gate that asks for input, and
    a field its schema has (when the schema lists its fields); a gate that
    may be skipped (`branches`: the earlier steps' `when`) only from its own branch."""
    errors = {}
    for path, ref in decision_references(args, where):
        gate_key, _, field = ref.partition(".input.") if isinstance(ref, str) else ("", "", "")
        gate = gates.get(gate_key)
        if gate is None or "input_schema" not in gate or not field:
            errors[path] = (
                'A $decision reference names an earlier gate that asks for input: "<gate key>.input.<field>".'
            )
        elif (branches or {}).get(gate_key) and branches[gate_key] != when:
            errors[path] = OTHER_BRANCH
        elif (known := fields_of(gate)) is not None and field.split(".")[0] not in known:
            errors[path] = f"That gate's input has no field {field.split('.')[0]!r}."
    return errors


def decision_errors(gate: dict, choice, given_input) -> dict[str, str]:
    """A decision's `choice` and `input` against the gate: a choice among
    its options (required when there are options, refused when none), an
    input valid against its schema (required when it has one)."""
    errors = {}
    options = gate.get("options")
    if options:
        if choice is None or choice == "":
            errors["choice"] = f"Choose one of: {', '.join(options)}."
        elif choice not in options:
            errors["choice"] = f"Not an option of this gate. Choose one of: {', '.join(options)}."
    elif choice not in (None, ""):
        errors["choice"] = "This gate offers no options."
    schema = gate.get("input_schema")
    if schema:
        if given_input is None:
            errors["input"] = "This gate asks for input."
        elif len(canonical_json(given_input)) > MAX_INPUT_CHARACTERS:
            errors["input"] = f"At most {MAX_INPUT_CHARACTERS} characters of JSON."
        else:
            for error in sorted(Draft202012Validator(schema).iter_errors(given_input), key=lambda e: list(e.path)):
                errors.setdefault(".".join(["input", *(str(p) for p in error.path)]), error.message)
    elif given_input is not None:
        errors["input"] = "This gate asks for no input."
    return errors


def taken(step: Step) -> bool:
    """The step's `when` names another choice than its gate took: it is
    skipped (its gate has opened, as every earlier step is done)."""
    if not step.when:
        return True
    decided = (
        Step.objects.filter(workflow_id=step.workflow_id, lane=0, key=step.when["gate"])
        .values_list("gate_decision", flat=True)
        .first()
    )
    return (decided or {}).get("choice") == step.when["choice"]


class Decisions:
    """The decisions of the gates before a step, read once when needed."""

    def __init__(self, step: Step):
        self.step = step
        self.found = None

    def all(self) -> dict[str, dict]:
        if self.found is None:
            self.found = dict(
                Step.objects.filter(
                    workflow_id=self.step.workflow_id,
                    lane=0,
                    position__lt=self.step.position,
                    gate_decision__isnull=False,
                ).values_list("key", "gate_decision")
            )
        return self.found

    def lookup(self, ref: str):
        """The value a `$decision` reference names; a missing one is the
        plan's fault (INVALID_ARGUMENTS), as for `$from`."""
        gate_key, _, path = ref.partition(".input.")
        value = (self.all().get(gate_key) or {}).get("input")
        for part in path.split(".") if path else []:
            if not isinstance(value, dict) or part not in value:
                raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
            value = value[part]
        if value is None:
            raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
        return value

    def digest(self) -> str | None:
        """`decisions_sha256` of an approval proof: SHA-256 of the canonical
        `[[gate key, choice, input], ...]` of the gates before the step, in
        key order; None when there were none."""
        plan = self.step.workflow.plan or []
        if self.step.lane or not any(typed(entry.get("gate")) for entry in plan) or not self.all():
            return None
        rows = [[key, d.get("choice"), d.get("input")] for key, d in sorted(self.all().items())]
        return sha256_hex(canonical_json(rows))
