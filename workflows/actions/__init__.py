"""Actions: the effects a plan may ask for, behind one small interface.

This module is the public interface, for the engine and for plugins alike:

    from workflows.actions import Action, Outcome, ActionError, FailureClass, Preview

To add an action, subclass `Action`, set its flags, declare its arguments
as an `Args` model (an `ArgsModel`; `Ref[T]`, `FromRef[T]`, `SecretRef[T]`
for fields that take references), implement `perform` (and `lookup` if the
remote system can answer "did operation K happen?"), decorate the class
with `@register`, and name its module as an entry point of the group
`durableconsole.actions` of your package (or in ACTION_MODULES): discovery
(`workflows.actions.plugins`) installs it at start-up, the built-ins
included. The engine never calls a remote system except through this
interface.

While perform() runs, `perform_context()` tells it which approved effect
it performs (workflow, revision, plan hash, step, approvers, policy
version); the HTTP helpers (`call`) attach that context's approval proof
(`Approval-Proof`, docs/explanation/approval-proofs.md#approval-proof) to every write, and an action that speaks
another protocol takes `perform_context().proof(method, url, body)` and
passes it on itself.
"""

from workflows.actions.args import FROM, ArgsModel, FromRef, Ref, SecretRef, field_errors, is_reference
from workflows.actions.base import Action, ActionError, Outcome, Preview
from workflows.actions.context import PerformContext, perform_context
from workflows.actions.registry import find, get, names, register, source
from workflows.actions.transport import call, classify_exception, classify_response, http_session
from workflows.states import FailureClass

__all__ = [
    "FROM",
    "Action",
    "ActionError",
    "ArgsModel",
    "FailureClass",
    "FromRef",
    "Outcome",
    "PerformContext",
    "Preview",
    "Ref",
    "SecretRef",
    "call",
    "classify_exception",
    "classify_response",
    "field_errors",
    "find",
    "get",
    "http_session",
    "is_reference",
    "names",
    "perform_context",
    "register",
    "source",
]
