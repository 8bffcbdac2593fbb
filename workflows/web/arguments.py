"""Step arguments and effect previews as reviewers read them.

Arguments are labelled from the action's schema (`Args.model_json_schema()`:
a field's title, else its name made readable), in the schema's order, then
any other keys by name. Each value becomes a node the templates draw
(`workflows/_value.html`): short text, long text folded, other scalars as
JSON, objects and lists, a `$from` reference as "result of step KEY" (with
the value it took once that step has a result) and a `$secret` reference as
`secret:NAME`, never a value. Agents write these args: the templates escape
every piece of them.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from workflows import actions
from workflows.actions.args import DECISION, is_decision
from workflows.audit import secrets
from workflows.states import PreviewState

# Text longer than this, or of more lines, is folded behind its first line.
FOLD_CHARACTERS = 200
FOLD_LINES = 4
HEAD_CHARACTERS = 80


@lru_cache(maxsize=256)
def _schema_fields(args_model: type) -> tuple[tuple[str, str, str], ...]:
    """(name, label, description) of each field of an Args model."""
    try:
        schema = args_model.model_json_schema()
    except Exception:  # a plugin's model that cannot describe itself still has args to show
        return ()
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return ()
    return tuple(
        (name, _label(name, spec.get("title")), str(spec.get("description") or ""))
        for name, spec in properties.items()
        if isinstance(spec, dict)
    )


def _label(name: str, title: Any) -> str:
    """A title the model gave the field, else its name made readable (the
    title pydantic makes up, "Ticket Id", reads worse than "Ticket id")."""
    if not title or title == name.replace("_", " ").title():
        return humanise(name)
    return str(title)


def humanise(name: str) -> str:
    words = re.sub(r"[_\-.]+", " ", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", str(name))).strip()
    return words[:1].upper() + words[1:].lower() if words else str(name)


def fields(action_name: str, args: Any, results: dict[str, Any] | None = None) -> list[dict]:
    """The labelled fields of one step's args. `results`: the recorded
    results of the plan's steps that have one, by key, to show the value
    each `$from` reference took."""
    if not isinstance(args, dict):
        return [{"name": "", "label": "Arguments", "description": "", "value": node(args, results)}]
    action = actions.find(action_name)
    described = _schema_fields(action.Args) if action is not None else ()
    shown = []
    for name, label, description in described:
        if name in args:
            shown.append({"name": name, "label": label, "description": description, "value": node(args[name], results)})
    known = {name for name, _, _ in described}
    # By name: PostgreSQL's jsonb does not keep the order keys were submitted in.
    for name, value in sorted(args.items()):
        if name not in known:
            shown.append({"name": name, "label": humanise(name), "description": "", "value": node(value, results)})
    return shown


def node(value: Any, results: dict[str, Any] | None = None) -> dict:
    """One value, as the templates draw it."""
    if secrets.is_reference(value):
        return {"kind": "secret", "name": value[secrets.SECRET]}
    if actions.is_reference(value):
        return _from(value[actions.FROM], results or {})
    if is_decision(value):
        gate, _, path = value[DECISION].partition(".input.")
        return {"kind": "decision", "gate": gate, "path": path}
    if isinstance(value, str):
        lines = value.splitlines()
        if len(value) > FOLD_CHARACTERS or len(lines) > FOLD_LINES:
            head = lines[0][:HEAD_CHARACTERS] if lines else ""
            return {"kind": "long_text", "value": value, "head": head, "length": len(value)}
        return {"kind": "text", "value": value}
    if isinstance(value, dict):
        return {"kind": "object", "entries": [(str(key), node(item, results)) for key, item in sorted(value.items())]}
    if isinstance(value, list):
        return {"kind": "list", "entries": [node(item, results) for item in value]}
    return {"kind": "json", "value": json.dumps(value)}


def _from(reference: str, results: dict[str, Any]) -> dict:
    step, _, path = reference.partition(".result")
    path = path.lstrip(".")
    found = {"kind": "from", "step": step, "path": path, "resolved": None}
    value = results.get(step)
    if value is None:
        return found
    for part in path.split(".") if path else []:
        if not isinstance(value, dict) or part not in value:
            return found
        value = value[part]
    if value is not None:
        # Recorded results are redacted where they enter: a secret never reaches them.
        found["resolved"] = node(value)
    return found


def preview_of(step) -> dict:
    """What the templates show of a step's preview (a Step row, or a dict
    of its preview fields)."""
    get = step.get if isinstance(step, dict) else lambda name: getattr(step, name)
    shown = {
        "state": get("preview_state"),
        "digest": get("preview_digest"),
        "error": get("preview_error"),
        "failure_class": get("preview_failure_class"),
        "summary": "",
        "details": None,
        "request": None,
    }
    preview = get("preview")
    if shown["state"] == PreviewState.READY and isinstance(preview, dict):
        shown["summary"] = preview.get("summary", "")
        shown["details"] = node(preview.get("details") or {})
        request = preview.get("request")
        if isinstance(request, dict):
            # Headers as pairs: a header a plan names `items` must not be
            # what a template's `headers.items` looks up.
            headers = request.get("headers")
            shown["request"] = {**request, "header_lines": list(headers.items()) if isinstance(headers, dict) else []}
    approved = get("approved_preview")
    if isinstance(approved, dict):
        shown["approved"] = {"summary": approved.get("summary", ""), "details": node(approved.get("details") or {})}
    return shown
