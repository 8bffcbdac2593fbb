"""Secrets by reference (docs/explanation/trust-core.md#secrets-by-reference): `{"$secret": "NAME"}` in args.

A plan names a secret; it never carries one. The web process knows only
the policy (`SECRETS_POLICY`: which actions and hosts may receive each
name) and refuses, at submission, any reference the policy does not allow,
with one message whatever the reason, so that a refusal does not tell
which names exist. The worker resolves the value at perform time from
`SECRET_<NAME>` in its environment or the file `SECRETS_DIR/NAME`, and
scrubs every value it resolved out of whatever it records afterwards.

This module reads only the standard library and settings, so that the
settings module can validate the policy with it at start-up.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from workflows.webhooks import addresses

SECRET = "$secret"
NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
# One message for an unknown name, a disallowed action and a disallowed host.
NOT_ALLOWED = "This secret reference is not allowed here by SECRETS_POLICY."
MALFORMED = 'A secret reference is {"$secret": "NAME"}, NAME in capitals, digits and "_" (at most 64).'
SCRUBBED = "[REDACTED secret:{name}]"


class SecretUnavailable(Exception):
    """The worker has no value for a secret the plan names."""

    def __init__(self, name: str):
        super().__init__(f"secret {name} has no value in this worker (set SECRET_{name} or SECRETS_DIR/{name})")
        self.name = name


# --- the policy (settings) ---------------------------------------------------


def parse_policy(raw: str | None, variable: str = "SECRETS_POLICY") -> dict[str, dict[str, list[str]]]:
    """`{"NAME": {"actions": [...], "hosts": [...]}}` from JSON text or from a
    JSON file's path; ImproperlyConfigured naming `variable` when it is not."""
    raw = (raw or "").strip()
    if not raw:
        return {}
    if not raw.startswith("{"):
        try:
            raw = Path(raw).read_text()
        except OSError as exc:
            raise ImproperlyConfigured(f"{variable} is neither JSON nor a readable file: {exc}") from None
    try:
        policy = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{variable} is not valid JSON: {exc}") from None
    if not isinstance(policy, dict):
        raise ImproperlyConfigured(
            f'{variable} must be a JSON object: {{"NAME": {{"actions": [...], "hosts": [...]}}}}'
        )
    rules = {}
    for name, rule in policy.items():
        if not NAME.fullmatch(name):
            raise ImproperlyConfigured(f"{variable}: {name!r} is not a secret name ([A-Z][A-Z0-9_]{{0,63}})")
        if not isinstance(rule, dict) or set(rule) - {"actions", "hosts"}:
            raise ImproperlyConfigured(f'{variable}: {name} must be {{"actions": [...], "hosts": [...]}}')
        for part in ("actions", "hosts"):
            items = rule.get(part, [])
            if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
                raise ImproperlyConfigured(f"{variable}: {name}.{part} must be a list of names")
        rules[name] = {
            "actions": list(rule.get("actions", [])),
            "hosts": [host.lower() for host in rule.get("hosts", [])],
        }
    return rules


def _policy() -> dict[str, dict[str, list[str]]]:
    from django.conf import settings

    return settings.SECRETS_POLICY


# --- references ----------------------------------------------------------------


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {SECRET} and isinstance(value[SECRET], str)


def references(value: Any, path: str):
    """(path, value) of every `$secret` reference in an args tree, well
    formed or not: any object with a `$secret` key is meant as one."""
    if isinstance(value, dict):
        if SECRET in value:
            yield path, value
            return
        for key, item in value.items():
            yield from references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from references(item, f"{path}.{index}")


def host_of(url: Any) -> str | None:
    """The host a URL's request goes to, read by the one parse the worker
    sends by (`addresses.parse`); None for what it would not send to."""
    if not isinstance(url, str):
        return None
    try:
        return addresses.parse(url).host
    except addresses.AddressRefused:
        return None


def allowed(name: str, action, args: dict) -> bool:
    """May the secret `name` go to `action` called with `args`? Every host
    the action sends to (`target_hosts`: a URL's host, a message's
    recipients' domains) must be one the policy lists; a URL that is itself
    a reference cannot be checked, so it is not allowed."""
    rule = _policy().get(name)
    if rule is None or action is None or action.name not in rule["actions"]:
        return False
    hosts = action.target_hosts(args)
    if hosts is None:
        return True
    return bool(hosts) and all(host in rule["hosts"] for host in hosts)


def check(args: Any, action, path: str) -> dict[str, str]:
    """Field errors of the `$secret` references in one step's args."""
    errors = {}
    for where, ref in references(args, path):
        if not is_reference(ref) or not NAME.fullmatch(ref[SECRET]):
            errors[where] = MALFORMED
        elif not allowed(ref[SECRET], action, args):
            errors[where] = NOT_ALLOWED
    return errors


def shown(value: Any) -> Any:
    """Args as pages and API answers show them: each reference as `secret:NAME`."""
    if is_reference(value):
        return f"secret:{value[SECRET]}"
    if isinstance(value, dict):
        return {key: shown(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shown(item) for item in value]
    return value


# --- resolution and scrubbing (worker) ----------------------------------------

# Every value this process resolved or can resolve, by value: scrubbed out of
# anything recorded. Preloaded with the policy's names, so that a worker
# restarted after a crash scrubs what a remote system echoes back on lookup.
_resolved: dict[str, str] = {}
_preloaded = False


def value_of(name: str) -> str:
    """The secret's value, from SECRET_<NAME> or SECRETS_DIR/NAME (one trailing
    newline dropped, as editors add one). Raises SecretUnavailable."""
    from django.conf import settings

    if not NAME.fullmatch(name):  # never a path outside SECRETS_DIR
        raise SecretUnavailable(name)
    value = os.environ.get(f"SECRET_{name}")
    if value is None and settings.SECRETS_DIR:
        try:
            value = (Path(settings.SECRETS_DIR) / name).read_text().removesuffix("\n")
        except OSError:
            value = None
    if not value:
        raise SecretUnavailable(name)
    _resolved[value] = name
    return value


def scrub(text: str) -> str:
    """`text` with every value resolved in this process replaced by a marker
    that names the secret (a remote system may echo what it was sent)."""
    global _preloaded
    if not _preloaded:
        _preloaded = True
        for name in _policy():
            try:
                value_of(name)
            except SecretUnavailable:
                pass
    # Longest first: a value that contains another is replaced whole.
    for value, name in sorted(_resolved.items(), key=lambda item: -len(item[0])):
        if value in text:
            text = text.replace(value, SCRUBBED.format(name=name))
    return text
