"""How pages show a step's args: a secret reference as `secret:NAME`, and
raw values as JSON, never as Python's repr."""

import json

from django import template

from workflows.audit import secrets
from workflows.db import canonical_json

register = template.Library()


@register.filter
def shown(args):
    return secrets.shown(args)


@register.filter
def as_json(value):
    """Pretty JSON, each secret reference as `secret:NAME`."""
    return json.dumps(secrets.shown(value), indent=2, ensure_ascii=False)


@register.filter
def as_json_line(value):
    """One line of canonical JSON, as the audit trail hashes it."""
    return canonical_json(value)
