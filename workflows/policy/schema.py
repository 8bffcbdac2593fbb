"""The published Cedar schema (docs/explanation/policies.md#schema).

Principal `Agent` in `Team`; actions `submit` and `auto_approve`; resource
`Step` with the step's action, its args, whether the action is destructive
or irreversible, and the plan's team; context the UTC hour, the ISO weekday
(1 Monday to 7 Sunday) and the number of steps in the plan.

`args` is a record of optional attributes, one for each argument name the
installed actions declare with a plain type (string, integer, boolean, or a
list of strings); a name two actions type differently, or with another type,
is left out, so a policy cannot read it. Every attribute is optional: a
policy reads one after `resource.args has <name>`.
"""

from __future__ import annotations

import json

from workflows import actions

ACTIONS = ("submit", "auto_approve")
REFERENCE_KEYS = ("$from", "$secret", "$decision")
_PLAIN = {"string": "String", "integer": "Long", "boolean": "Bool"}


def _plain_type(spec: dict) -> str | None:
    """The Cedar type of one argument's JSON Schema, references aside; None
    when it has no plain type."""
    options = spec.get("anyOf", [spec])
    plain = [o for o in options if not set(o.get("properties", {})) & set(REFERENCE_KEYS)]
    types = set()
    for option in plain:
        kind = option.get("type")
        if kind in _PLAIN:
            types.add(_PLAIN[kind])
        elif kind == "array" and option.get("items", {}).get("type") == "string":
            types.add("Set<String>")
        elif kind != "null":
            return None
    return types.pop() if len(types) == 1 else None


def argument_types() -> dict[str, str]:
    """Each argument name of the installed actions with its Cedar type."""
    found: dict[str, str | None] = {}
    for name in actions.names():
        properties = actions.get(name).Args.model_json_schema().get("properties", {})
        for arg, spec in properties.items():
            kind = _plain_type(spec)
            found[arg] = kind if found.get(arg, kind) == kind else None
    return {arg: kind for arg, kind in sorted(found.items()) if kind is not None}


def text() -> str:
    """The schema in Cedar's own syntax, as published."""
    # Quoted: an argument name may be a word Cedar reserves.
    args = "".join(f"  {json.dumps(arg)}?: {kind},\n" for arg, kind in argument_types().items())
    return (
        "entity Team;\n"
        "entity Agent in [Team];\n"
        f"type Args = {{\n{args}}};\n"
        "entity Step {\n"
        "  action: String,\n"
        "  args: Args,\n"
        "  destructive: Bool,\n"
        "  irreversible: Bool,\n"
        "  team: String,\n"
        "};\n"
        "action submit, auto_approve appliesTo {\n"
        "  principal: [Agent],\n"
        "  resource: [Step],\n"
        "  context: { hour: Long, weekday: Long, steps_in_plan: Long },\n"
        "};\n"
    )
