"""What each installed action is, as clients and operators see it: its
flags and the JSON Schema of its arguments."""

from __future__ import annotations

from typing import Any

from workflows.actions.base import Action
from workflows.actions.registry import get, names


def args_schema(action: Action, ref_template: str = "#/$defs/{model}") -> dict[str, Any]:
    """The JSON Schema of what a plan may send as the action's args."""
    schema = action.Args.model_json_schema(ref_template=ref_template, mode="validation")
    return {**schema, "title": f"{action.name} args"}


def describe(action: Action) -> dict[str, Any]:
    return {
        "name": action.name,
        "idempotent": action.idempotent,
        "can_lookup": action.can_lookup,
        "destructive": action.destructive,
        "irreversible": action.irreversible,
        "compensation": action.compensation,
        "has_preview": action.has_preview,
        "args_schema": args_schema(action),
    }


def catalog() -> list[dict[str, Any]]:
    return [describe(get(name)) for name in names()]
