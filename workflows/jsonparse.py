"""JSON request bodies with a nesting limit.

`json.loads` recurses once per level: a body of 100,000 `[` would exhaust
the stack. Depth is measured first, in one linear scan that skips strings.
"""

import json

from ninja.parser import Parser

MAX_DEPTH = 32


class TooDeep(ValueError):
    pass


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


def loads(body: bytes | str):
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    if depth(text) > MAX_DEPTH:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(text)


class DepthLimitedParser(Parser):
    def parse_body(self, request):
        return loads(request.body)
