"""What an action class must be before it is installed.

Each problem is found at start-up, never on the first plan that uses the
action: a flag that is not a bool (`idempotent = "no"` is true), a
`can_lookup` without `lookup`, or an `Args` that is no pydantic model would
otherwise surface as a wrong retry, a crash mid-recovery or a 500.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from workflows.actions.base import Action

FLAGS = ("idempotent", "can_lookup", "destructive", "in_process", "preview_binding", "preview_required")
# Names end up in URLs, metric labels and a 64-character column.
NAME = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*")
NAME_LENGTH = 64


def _implements(cls: type, method: str) -> bool:
    return getattr(cls, method, None) is not None and getattr(cls, method) is not getattr(Action, method, None)


def class_problems(cls: object) -> list[str]:
    """The problems of one class on its own (compensations are checked
    against the whole set, `compensation_problems`)."""
    if not (isinstance(cls, type) and issubclass(cls, Action)):
        return [f"{cls!r} is not a subclass of workflows.actions.Action"]
    problems = []
    name = getattr(cls, "name", None)
    if name is None:
        problems.append(f"{cls.__qualname__} has no `name`")
    elif not isinstance(name, str) or len(name) > NAME_LENGTH or not NAME.fullmatch(name):
        problems.append(
            f"{cls.__qualname__}.name must be lower-case letters, digits, '_', '-' and dots, "
            f"at most {NAME_LENGTH} characters; got {name!r}"
        )
    if not _implements(cls, "perform"):
        problems.append(f"{cls.__qualname__} does not implement perform(args, operation_key)")
    for flag in FLAGS:
        value = getattr(cls, flag, False)
        if type(value) is not bool:
            problems.append(f"{cls.__qualname__}.{flag} must be True or False; got {value!r}")
    if getattr(cls, "can_lookup", False) is True and not _implements(cls, "lookup"):
        problems.append(f"{cls.__qualname__} sets can_lookup but does not implement lookup(operation_key)")
    if getattr(cls, "preview_binding", False) is True and not _implements(cls, "preview"):
        problems.append(f"{cls.__qualname__} sets preview_binding but does not implement preview(args)")
    # A preview that is its request's template alone is still one to wait for.
    if getattr(cls, "preview_required", False) is True and not (
        _implements(cls, "preview") or _implements(cls, "request")
    ):
        problems.append(
            f"{cls.__qualname__} sets preview_required but implements neither preview(args) nor request(args)"
        )
    compensation = getattr(cls, "compensation", None)
    if compensation is not None and not isinstance(compensation, str):
        problems.append(f"{cls.__qualname__}.compensation must be an action's name or None; got {compensation!r}")
    args = getattr(cls, "Args", None)
    if not (isinstance(args, type) and issubclass(args, BaseModel)):
        problems.append(f"{cls.__qualname__}.Args must be a pydantic model (a BaseModel subclass); got {args!r}")
    else:
        try:
            args.model_json_schema()
        except Exception as exc:
            problems.append(f"{cls.__qualname__}.Args has no JSON schema: {type(exc).__name__}: {exc}")
    if not problems:
        try:
            cls()
        except Exception as exc:
            problems.append(f"{cls.__qualname__}() failed: {type(exc).__name__}: {exc}")
    return problems


def compensation_problems(action: Action, installed: set[str]) -> list[str]:
    compensation = action.compensation
    if compensation is not None and compensation not in installed:
        return [f"{type(action).__qualname__}.compensation names {compensation!r}, which is not installed"]
    return []
