"""How pages show a step's args: a secret reference as `secret:NAME`."""

from django import template

from workflows.audit import secrets

register = template.Library()


@register.filter
def shown(args):
    return secrets.shown(args)
