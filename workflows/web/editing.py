"""The form a reviewer edits a step's arguments in, drawn from the action's
argument schema: a text box for text, a number box for numbers, a choice for
an enum or a yes/no, and JSON for the rest (objects, lists, `$from` and
`$secret` references). What the form sends back is turned into the
arguments' JSON types here; whether they are valid is decided by the same
validation as a submission (`operations.revisions`), never by this module.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from workflows import actions
from workflows.web import arguments

LONG_TEXT = 200
MISSING = object()


@dataclass
class Input:
    name: str  # the form field: "<step key>:<argument>"
    argument: str
    label: str
    description: str
    kind: str  # text, textarea, integer, number, boolean, choice, json
    value: str
    required: bool
    choices: list[str] = field(default_factory=list)
    error: str = ""


def _alternatives(spec: dict) -> list[dict]:
    """What a field may hold, leaving out null and the `$from` / `$secret`
    reference objects (a reference is edited as JSON)."""
    options = spec.get("anyOf")
    if not isinstance(options, list):
        return [spec]
    found = []
    for option in options:
        if not isinstance(option, dict) or option.get("type") == "null":
            continue
        properties = option.get("properties")
        if (
            option.get("type") == "object"
            and isinstance(properties, dict)
            and set(properties) in ({"$from"}, {"$secret"})
        ):
            continue
        found.append(option)
    return found


def _fitting(spec: dict, value: Any) -> dict | None:
    """The alternative the field's current value (or, absent, its only
    alternative) is shown as, if a plain input can show it."""
    options = _alternatives(spec)
    if value is MISSING:
        return options[0] if len(options) == 1 else None
    wanted = {str: ("string",), bool: ("boolean",), int: ("integer", "number"), float: ("number",)}.get(type(value))
    for option in options:
        if wanted and (option.get("type") in wanted or (wanted == ("string",) and "enum" in option)):
            return option
    return None


def _kind(spec: dict, value: Any) -> str:
    option = None if isinstance(value, dict | list) else _fitting(spec, value)
    if option is None:
        return "json"  # an object, a list, a reference, or a value of several possible shapes
    enum = option.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(item, str) for item in enum):
        return "choice"
    kind = option.get("type")
    if kind == "string":
        longest = option.get("maxLength")
        long_value = isinstance(value, str) and (len(value) > 80 or "\n" in value)
        return "textarea" if long_value or longest is None or longest > LONG_TEXT else "text"
    if kind in ("integer", "number", "boolean"):
        return kind
    return "json"


def _shown(kind: str, value: Any) -> str:
    if value is MISSING:
        return ""
    if kind in ("text", "textarea", "choice") and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, indent=2, ensure_ascii=False)


def inputs(step_key: str, action_name: str, args: dict) -> list[Input]:
    """The inputs for one step, in the schema's order; arguments the schema
    does not name (a plugin's model that cannot describe itself) as JSON."""
    action = actions.find(action_name)
    schema = {}
    if action is not None:
        try:
            schema = action.Args.model_json_schema()
        except Exception:  # shown as JSON below
            schema = {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = set(schema.get("required") or [])
    found = []
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        value = args.get(name, MISSING)
        kind = _kind(spec, value)
        option = _fitting(spec, value) or {}
        found.append(
            Input(
                name=f"{step_key}:{name}",
                argument=name,
                label=arguments._label(name, spec.get("title")),
                description=str(spec.get("description") or ""),
                kind=kind,
                value=_shown(kind, value),
                required=name in required,
                choices=[""] * (name not in required) + list(option.get("enum") or []) if kind == "choice" else [],
            )
        )
    for name in sorted(set(args) - set(properties)):
        found.append(
            Input(
                name=f"{step_key}:{name}",
                argument=name,
                label=arguments.humanise(name),
                description="",
                kind="json",
                value=_shown("json", args[name]),
                required=False,
            )
        )
    return found


def parse(step_inputs: list[Input], posted) -> tuple[dict, bool]:
    """The step's arguments as the form sent them. An empty box leaves the
    argument out. Sets each input's `error` and `value`; returns (args, ok)."""
    args, ok = {}, True
    for item in step_inputs:
        raw = posted.get(item.name, "")
        item.value = raw
        if raw == "" and item.kind not in ("text", "textarea"):
            continue
        if raw == "" and not item.required:
            continue
        try:
            args[item.argument] = _value(item.kind, raw)
        except ValueError as exc:
            item.error, ok = str(exc), False
    return args, ok


def _value(kind: str, raw: str) -> Any:
    if kind in ("text", "textarea", "choice"):
        return raw
    if kind == "boolean":
        if raw not in ("true", "false"):
            raise ValueError("Choose yes or no.")
        return raw == "true"
    if kind == "integer":
        try:
            return int(raw.strip(), 10)
        except ValueError:
            raise ValueError("Enter a whole number.") from None
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError("Enter a number.")
    return value


def _finite(text: str) -> float:
    """A number too large for a float (1e400) is refused, not stored as infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large a number.")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number.")
