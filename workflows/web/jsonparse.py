"""JSON request bodies, refused unless every value can be stored and read back.

`json.loads` recurses once per level: a body of 100,000 `[` would exhaust
the stack, so depth is measured first, in one linear scan that skips
strings. Python's parser is also more lenient than JSON and than the
databases: it accepts `NaN` and `Infinity`, turns `1e999` into infinity,
keeps the last of two equal keys, and passes lone surrogates (`"\\ud800"`)
and NUL characters that neither UTF-8 nor PostgreSQL text can hold. Each of
these is refused (never rewritten) with a message that says what is wrong
and, for text, where.
"""

import json
import math
import re

from ninja.parser import Parser

MAX_DEPTH = 32
# Integers that fit a signed 64-bit column, and SQLite's JSON functions.
MAX_INTEGER = 2**63 - 1
MIN_INTEGER = -(2**63)
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class BadJSON(ValueError):
    """The body is not JSON this API accepts; the message says why."""


def depth(text: str) -> int:
    deepest = level = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            level += 1
            deepest = max(deepest, level)
        elif char in "]}":
            level -= 1
    return deepest


def _constant(name: str):
    raise BadJSON(f"{name} is not a JSON number; numbers must be finite.")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"The number {text[:40]} is too large; numbers must be finite.")
    return value


def _int(text: str) -> int:
    # Checked on the digits first: int() of thousands of digits is refused by Python itself (or slow).
    if len(text.lstrip("-")) > 19 or not MIN_INTEGER <= int(text) <= MAX_INTEGER:
        raise BadJSON(f"The integer {text[:40]}{'…' if len(text) > 40 else ''} is outside the 64-bit range.")
    return int(text)


def _object(pairs: list[tuple[str, object]]) -> dict:
    result = {}
    for key, value in pairs:
        if key in result:
            raise BadJSON(f"The key {key!r} appears twice in one object.")
        result[key] = value
    return result


def _check_text(value, path: str) -> None:
    """Every string and key holds text that UTF-8 and PostgreSQL can store."""
    if isinstance(value, str):
        if UNSTORABLE.search(value):
            raise BadJSON(f"{path or 'The body'}: text may not contain NUL characters or lone surrogates.")
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if UNSTORABLE.search(key):
                raise BadJSON(f"{path or 'The body'}: a key may not contain NUL characters or lone surrogates.")
            _check_text(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, f"{path}.{index}" if path else str(index))


def loads(body: bytes | str):
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError:
        raise BadJSON("The body is not UTF-8 text.") from None
    if depth(text) > MAX_DEPTH:
        raise BadJSON(f"JSON nested deeper than {MAX_DEPTH} levels.")
    try:
        value = json.loads(
            text, parse_constant=_constant, parse_float=_float, parse_int=_int, object_pairs_hook=_object
        )
    except json.JSONDecodeError as exc:
        raise BadJSON(f"The body is not valid JSON: {exc}") from None
    _check_text(value, "")
    return value


class DepthLimitedParser(Parser):
    """Every API body is one JSON object."""

    def parse_body(self, request):
        value = loads(request.body)
        if not isinstance(value, dict):
            raise BadJSON("The body must be a JSON object.")
        return value
