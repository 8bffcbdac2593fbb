"""`http.post`: a webhook to a URL the plan names."""

from __future__ import annotations

from urllib.parse import urlsplit

from workflows.actions.base import Action, ActionError, Outcome, Preview
from workflows.actions.registry import register
from workflows.actions.transport import call
from workflows.states import FailureClass


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
    required_args = ("url",)

    def validate(self, args):
        errors = {}
        url = args.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            errors["url"] = "Must be an http:// or https:// URL."
        if "json" in args and not isinstance(args["json"], (dict, list)):
            errors["json"] = "Must be a JSON object or array."
        if self.HONOURS_KEY in args and not isinstance(args[self.HONOURS_KEY], bool):
            errors[self.HONOURS_KEY] = "Must be true or false."
        return errors

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

    def perform(self, args, operation_key):
        response = call("POST", args["url"], operation_key=operation_key, json=args.get("json", {}))
        try:
            body = response.json()
        except ValueError:
            body = None
        return Outcome(result={"status": response.status_code, "body": body if isinstance(body, dict) else None})
