"""The form of a typed gate (docs/explanation/review.md#typed-decisions), drawn from its
`input_schema` and read back from a plain POST, so it works without
JavaScript: a string is a text box (a select when it has an `enum`), a
number or integer a number box, a boolean a checkbox; anything else is a
JSON text area. Once a first approver gave the choice and input, the others
are shown those and post them back as they are (`input_json`): they approve
that input or reject.

What the posted form says is read, not judged: the operation checks the
choice and input against the gate (`choices.decision_errors`).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import QueryDict

from workflows.db import canonical_json

PREFIX = "input."


def _kind(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "json"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "enum"
    return {"string": "text", "number": "number", "integer": "integer", "boolean": "boolean"}.get(
        schema.get("type"), "json"
    )


def fields(gate: dict) -> list[dict]:
    """The input fields to draw, in the schema's order."""
    schema = gate.get("input_schema") or {}
    required = set(schema.get("required") or [])
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    return [
        {
            "name": PREFIX + name,
            "label": (spec.get("title") if isinstance(spec, dict) else None) or name,
            "description": spec.get("description", "") if isinstance(spec, dict) else "",
            "kind": _kind(spec),
            "required": name in required,
            # Each enum value as JSON: the option's value, read back with json.loads.
            "options": [(json.dumps(v), v) for v in spec["enum"]] if _kind(spec) == "enum" else [],
        }
        for name, spec in properties.items()
    ]


def form_context(gate: dict, standing: dict | None) -> dict | None:
    """What the template draws for a typed gate: the options and fields,
    or the choice and input another approver already gave."""
    if not isinstance(gate, dict) or ("options" not in gate and "input_schema" not in gate):
        return None
    found = {"options": gate.get("options") or [], "asks_input": "input_schema" in gate}
    if standing is not None:
        input_value = standing.get("input")
        found["standing"] = {
            "choice": standing.get("choice") or "",
            "input": input_value,
            "input_json": canonical_json(input_value) if input_value is not None else "",
        }
    else:
        found["fields"] = fields(gate)
    return found


class Unreadable(ValueError):
    """A posted field that is not what its box takes (a number box with words)."""

    def __init__(self, fields: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields


def read(gate: dict, post: QueryDict) -> tuple[str | None, Any]:
    """The choice and input a posted form gives (None for either when the
    form has none)."""
    choice = post.get("choice") or None
    if not isinstance(gate, dict) or "input_schema" not in gate:
        return choice, None
    if "input_json" in post:
        try:
            return choice, json.loads(post["input_json"])
        except ValueError:
            raise Unreadable({"input": "Not JSON."}) from None
    given: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for field in fields(gate):
        name, kind = field["name"], field["kind"]
        key = name.removeprefix(PREFIX)
        if kind == "boolean":
            given[key] = post.get(name) == "on"
            continue
        text = post.get(name, "")
        if text == "":
            continue  # left empty: absent (the schema says whether it was required)
        try:
            if kind == "number":
                given[key] = float(text) if any(c in text for c in ".eE") else int(text)
            elif kind == "integer":
                given[key] = int(text)
            elif kind in ("enum", "json"):
                given[key] = json.loads(text)
            else:
                given[key] = text
        except ValueError:
            problems[f"input.{key}"] = "Not a number." if kind in ("number", "integer") else "Not JSON."
    if problems:
        raise Unreadable(problems)
    return choice, given
