"""`http.post`: a webhook to a URL the plan names."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AnyHttpUrl, Field, StrictBool, field_validator
from pydantic_core import PydanticCustomError, core_schema

from workflows.actions.args import ArgsModel, Check, FromRef, SecretRef
from workflows.actions.base import Action, ActionError, Outcome, Preview
from workflows.actions.registry import register
from workflows.actions.templates import HttpRequest, json_text, text
from workflows.actions.transport import call
from workflows.states import FailureClass
from workflows.webhooks import outbound

# Headers the console sets itself or that frame the request: a plan that
# could set them could forge the approval proof or the idempotency key,
# reach another virtual host, or split the request in two for the receiver.
RESERVED_HEADERS = (
    "Approval-Proof",
    "Idempotency-Key",
    "Host",
    "Content-Length",
    "traceparent",
    "Cookie",
    "Transfer-Encoding",
)
_RESERVED = {name.lower() for name in RESERVED_HEADERS}
RESERVED_MESSAGE = f"Set by the console, never by a plan (reserved: {', '.join(RESERVED_HEADERS)})."

# A name is an RFC 9110 token; a value one line of visible ASCII, spaces and
# tabs (what every HTTP client sends as it is).
TOKEN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$"
HeaderName = Annotated[
    str,
    Check(re.compile(TOKEN).fullmatch, "Not a header name: 1 to 64 letters, digits or !#$%&'*+.^_`|~-.", pattern=TOKEN),
    Check(lambda name: name.lower() not in _RESERVED, RESERVED_MESSAGE),
]
HeaderValue = Annotated[
    str,
    Field(max_length=4096),
    Check(
        lambda value: all(c == "\t" or " " <= c <= "~" for c in value),
        "Must be one line of printable ASCII.",
        pattern=r"^[\t\x20-\x7e]*$",
    ),
]


class _OutboundRules:
    """The address rules a URL is judged by before it is ever called (its
    form, scheme and host: `outbound.checked`), applied to the text as
    submitted, which is what the worker will parse and call."""

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    @staticmethod
    def _validate(value, handler):
        valid = handler(value)
        if problem := outbound.scheme_problem(value):
            raise PydanticCustomError("outbound_url", "{message}", {"message": problem})
        return valid


Url = Annotated[AnyHttpUrl, Field(max_length=2048), _OutboundRules()]


def _object_or_array(value: Any) -> bool:
    return isinstance(value, (dict, list))


JsonBody = Annotated[
    Any, Check(_object_or_array, "Must be a JSON object or array.", anyOf=[{"type": "object"}, {"type": "array"}])
]


@register
class HttpPost(Action):
    """A webhook. It carries the operation key as Idempotency-Key, but only
    the plan can say whether the receiver drops repeats
    (`receiver_honours_idempotency_key: true`); without that promise a
    repeat could act twice, and there is no way to ask the receiver what it
    received, so an unknown outcome goes IN_DOUBT."""

    name = "http.post"
    idempotent = False
    HONOURS_KEY = "receiver_honours_idempotency_key"
    compensation = None

    class Args(ArgsModel):
        url: FromRef[Url] = Field(description="http:// or https://; its host is what SECRETS_POLICY's hosts allow.")
        # `json` would shadow BaseModel.json: the field takes its name by alias.
        body: FromRef[JsonBody] = Field(
            default_factory=dict,
            alias="json",
            description="The body, a JSON object or array; may hold references anywhere.",
        )
        headers: dict[HeaderName, SecretRef[HeaderValue]] = Field(
            default_factory=dict,
            max_length=32,
            json_schema_extra={"additionalProperties": False},
            description="Extra headers: plain text, or a secret by reference for credentials. "
            f"Reserved (any case): {', '.join(RESERVED_HEADERS)}.",
        )
        receiver_honours_idempotency_key: StrictBool = Field(
            False,
            description="The receiver drops a repeated Idempotency-Key: only then is the call repeated "
            "after an unknown outcome.",
        )

        @field_validator("headers")
        @classmethod
        def _each_header_once(cls, headers):
            seen = set()
            for name in headers:
                if name.lower() in seen:
                    raise PydanticCustomError(
                        "duplicate_header", "{name} is given twice (header names ignore case).", {"name": name}
                    )
                seen.add(name.lower())
            return headers

    def is_idempotent(self, args):
        return args.get(self.HONOURS_KEY) is True

    def preview(self, args):
        """Where the call goes and how, read from the args alone: the
        receiver is not asked. Headers by name only (their values may be secrets)."""
        try:
            url = urlsplit(args["url"])
            port = url.port
        except (TypeError, ValueError, KeyError):
            raise ActionError(FailureClass.INVALID_ARGUMENTS, "url is not a URL") from None
        headers = args.get("headers")
        details = {
            "method": "POST",
            "scheme": url.scheme,
            "host": url.hostname,
            "port": port,
            "path": url.path or "/",
            "query": bool(url.query),
            "headers": sorted(headers) if isinstance(headers, dict) else [],
            "repeated_on_unknown_outcome": self.is_idempotent(args),
        }
        return Preview(f"POST to {url.hostname}{details['path']}", details)

    def request(self, args):
        """The POST: the plan's URL, its headers and its JSON body as sent
        (`templates.compact_json`), labelled JSON unless
        the plan names its own Content-Type."""
        headers = [(name, text(value)) for name, value in (args.get("headers") or {}).items()]
        if all(name.lower() != "content-type" for name, _ in headers):
            headers.insert(0, ("Content-Type", ("application/json",)))
        return HttpRequest("POST", text(args["url"]), tuple(headers), json_text(args.get("json", {})))

    def perform(self, args, operation_key):
        sent = self.request(args).sent()
        response = call(
            "POST",
            sent["url"],
            operation_key=operation_key,
            data=sent["body"].encode(),
            headers=sent["headers"],
            checked=True,
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        return Outcome(result={"status": response.status_code, "body": body if isinstance(body, dict) else None})
