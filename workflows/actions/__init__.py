"""Actions: the effects a plan may ask for, behind one small interface.

This module is the public interface, for the engine and for plugins alike:

    from workflows.actions import Action, Outcome, ActionError, FailureClass, Preview

To add an action, subclass `Action`, set its flags, implement `perform`
(and `lookup` if the remote system can answer "did operation K happen?"),
and decorate the class with `@register`. The engine never calls a remote
system except through this interface.
"""

from workflows.actions.base import FROM, Action, ActionError, Outcome, Preview, is_reference
from workflows.actions.registry import find, get, names, register
from workflows.actions.transport import call, classify_exception, classify_response, http_session
from workflows.states import FailureClass

__all__ = [
    "FROM", "Action", "ActionError", "FailureClass", "Outcome", "Preview",
    "call", "classify_exception", "classify_response", "find", "get", "http_session",
    "is_reference", "names", "register",
]

# The built-in families.
from workflows.actions import mail, noop, tickets, webhooks  # noqa: E402,F401
