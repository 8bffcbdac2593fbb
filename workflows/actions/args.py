"""An action's arguments, declared as a pydantic model (docs/explanation/actions.md#actions).

Plans come from agents, so an action's `Args` is a contract, not a
convenience: every field typed, nothing coerced ("1" is not an int, 1 is
not a string), no key the model does not name. `ArgsModel` is that base.

The model only judges the args. What is stored, hashed, shown and
performed is always the raw JSON as submitted, never the model's
re-serialisation: a default the model would fill in, or a value it would
normalise (a URL's trailing slash), must not change what a reviewer
approved.

A field takes a reference only when it says so:

    title: Ref[str]            # a string, {"$from": ...} or {"$secret": ...}
    ticket_id: FromRef[int]    # an int or {"$from": "<step>.result.<field>"}
    token: SecretRef[str]      # a string or {"$secret": "NAME"}

References are resolved by the worker just before the effect; the model
sees them unresolved and lets them through as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError, core_schema

from workflows.audit import secrets

FROM = "$from"
SECRET = secrets.SECRET
# A typed gate's input (docs/explanation/review.md#typed-decisions): taken wherever `$from` is.
DECISION = "$decision"
FROM_MALFORMED = 'A $from reference is {"$from": "<step key>.result.<field>"}.'
DECISION_MALFORMED = 'A $decision reference is {"$decision": "<gate key>.input.<field>"}.'

# How each kind of reference appears in a JSON Schema, beside the value's own schema.
REFERENCE_SCHEMAS = {
    FROM: {
        "type": "object",
        "title": "Result of an earlier step",
        "properties": {
            FROM: {
                "type": "string",
                "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.result(\..+)?$",
                "description": "<step key>.result.<field>, resolved when the step runs",
            }
        },
        "required": [FROM],
        "additionalProperties": False,
    },
    SECRET: {
        "type": "object",
        "title": "Secret by name",
        "properties": {
            SECRET: {
                "type": "string",
                "pattern": f"^{secrets.NAME.pattern}$",
                "description": "a name SECRETS_POLICY allows; the worker sends its value",
            }
        },
        "required": [SECRET],
        "additionalProperties": False,
    },
}


class ArgsModel(BaseModel):
    """The base of an action's `Args`: strict types, unknown keys refused.
    Cross-field checks go in a pydantic `model_validator`."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _not_a_reference(cls, value):
        # An object field takes a reference only as Ref[Model]: otherwise
        # say so, rather than "unknown key $from".
        if kind := _meant_as(value):
            raise PydanticCustomError(
                "reference_not_allowed", "This field does not take a {kind} reference.", {"kind": kind}
            )
        return value


class AnyArgs(BaseModel):
    """Any JSON object: the arguments of an action that declares no model."""

    model_config = ConfigDict(extra="allow")


class Check:
    """A constraint with a message of its own, for a field's type:
    `Annotated[str, Check(str.strip, "Must not be only blanks.", pattern=r"\\S")]`.
    `predicate(value)` must be true; `schema` is what a JSON Schema can say
    of the same rule."""

    def __init__(self, predicate: Callable[[Any], Any], message: str, **schema: Any):
        self.predicate, self.message, self.schema = predicate, message, schema

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema, handler):
        return {**handler(schema), **self.schema}

    def _check(self, value):
        if not self.predicate(value):
            raise PydanticCustomError("check", "{message}", {"message": self.message})
        return value


NOT_BLANK = Check(str.strip, "Must not be empty or only blanks.", pattern=r"\S")
ONE_LINE = Check(lambda text: "\r" not in text and "\n" not in text, "Must be one line.", pattern=r"^[^\r\n]*$")


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {FROM} and isinstance(value[FROM], str)


def is_decision(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {DECISION} and isinstance(value[DECISION], str)


def _meant_as(value: Any) -> str | None:
    """The kind of reference `value` is meant to be, well formed or not."""
    if isinstance(value, dict):
        for kind in (FROM, SECRET, DECISION):
            if kind in value:
                return kind
    return None


@dataclass(frozen=True)
class _TakesReferences:
    kinds: tuple[str, ...]

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(self, schema, handler):
        return {"anyOf": [handler(schema), *(REFERENCE_SCHEMAS[kind] for kind in self.kinds)]}

    def _validate(self, value, handler):
        kind = _meant_as(value)
        if kind is None:
            return handler(value)
        if kind not in self.kinds and not (kind == DECISION and FROM in self.kinds):
            raise PydanticCustomError(
                "reference_not_allowed", "This field does not take a {kind} reference.", {"kind": kind}
            )
        if kind == FROM and not is_reference(value):
            raise PydanticCustomError("from_reference", FROM_MALFORMED)
        if kind == DECISION and not is_decision(value):
            raise PydanticCustomError("decision_reference", DECISION_MALFORMED)
        if kind == SECRET and not (secrets.is_reference(value) and secrets.NAME.fullmatch(value[SECRET])):
            raise PydanticCustomError("secret_reference", secrets.MALFORMED)
        return value


class Ref:
    """`Ref[T]`: a T, a `$from` reference or a `$secret` reference."""

    kinds: tuple[str, ...] = (FROM, SECRET)

    def __class_getitem__(cls, item):
        return Annotated[item, _TakesReferences(cls.kinds)]


class FromRef(Ref):
    """`FromRef[T]`: a T or a `$from` reference to an earlier step's result."""

    kinds = (FROM,)


class SecretRef(Ref):
    """`SecretRef[T]`: a T or a `$secret` reference (its value is text)."""

    kinds = (SECRET,)


OWN_ERRORS = ("reference_not_allowed", "from_reference", "secret_reference", "decision_reference")


def _message(error: dict, model: type[BaseModel]) -> str:
    kind = _meant_as(error.get("input"))
    if kind and error["type"] not in OWN_ERRORS and error["type"].endswith("_type"):
        return f"This field does not take a {kind} reference."
    if error["type"] == "missing":
        return "This field is required."
    if error["type"] in ("model_type", "dict_type") and not error["loc"]:
        return "Must be a JSON object."
    if error["type"] == "extra_forbidden":
        if len(error["loc"]) == 1:
            names = [field.alias or name for name, field in model.model_fields.items()]
            return f"Unknown argument. This action takes: {', '.join(names) or 'no arguments'}."
        return "Unknown key."
    return error["msg"]


def field_errors(model: type[BaseModel], args: Any, path: str) -> dict[str, str]:
    """The errors of `args` against `model`, keyed by dotted path under
    `path` (`steps.0.args.headers.Host`), the first error of each path."""
    try:
        model.model_validate(args)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for error in exc.errors(include_url=False, include_context=False):
            # A dict key's error names the key, as a value's error would.
            parts = [str(part) for part in error["loc"] if part != "[key]"]
            errors.setdefault(".".join([path, *parts]), _message(error, model))
        return errors
    return {}
