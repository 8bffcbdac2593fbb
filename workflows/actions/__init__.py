"""Actions: the effects a plan may ask for, behind one small interface.

This module is the public interface, for the engine and for plugins alike:

    from workflows.actions import Action, Outcome, ActionError, FailureClass, Preview

To add an action, subclass `Action`, set its flags, implement `perform`
(and `lookup` if the remote system can answer "did operation K happen?"),
decorate the class with `@register`, and name its module as an entry point
of the group `durableconsole.actions` of your package (or in ACTION_MODULES):
discovery (`workflows.actions.plugins`) installs it at start-up, the
built-ins included. The engine never calls a remote system except through
this interface.
"""

from workflows.actions.base import FROM, Action, ActionError, Outcome, Preview, is_reference
from workflows.actions.registry import find, get, names, register, source
from workflows.actions.transport import call, classify_exception, classify_response, http_session
from workflows.states import FailureClass

__all__ = [
    "FROM", "Action", "ActionError", "FailureClass", "Outcome", "Preview",
    "call", "classify_exception", "classify_response", "find", "get", "http_session",
    "is_reference", "names", "register", "source",
]
