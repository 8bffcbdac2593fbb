"""The approval proof of each effect, from the engine's side (docs/explanation/approval-proofs.md#approval-proof).

When it writes a REQUESTED attempt, the engine names the proof that
attempt's writes will carry: the signing key's id, a unique id, and the
approvers the policy recheck counted (`policy.evaluate_many` leaves them on
the step). When it performs the effect, it hands the action a
`PerformContext` with the same identity, from which the HTTP helpers sign a
proof over each request as it is sent. So the attempt row records which
key signed and whom the proof names, and the token itself is never stored.
"""

from __future__ import annotations

from workflows.actions import Action, PerformContext
from workflows.actions.context import new_jti
from workflows.audit import signing
from workflows.engine import choices
from workflows.models import Attempt, Step


def identity(step: Step, action: Action | None, kid: str = "") -> dict:
    """The proof fields of a new attempt of `step` (`kid`: the current key's
    id, when the caller read it already): none for an in-process action,
    which sends nothing out of the worker."""
    if action is None or action.in_process:
        return {}
    return {"proof_kid": kid or current_kid(), "proof_jti": new_jti(), "proof_approvers": approvers_of(step)}


def approvers_of(step: Step) -> list[dict]:
    """Whom the policy recheck found approving the step (`policy.evaluate_many`)."""
    return getattr(step, "approvers", [])


def current_kid() -> str:
    """The id of the key that signs proofs now (read once per batch of attempts)."""
    return signing.current().kid


def keyset() -> signing.KeySet:
    return signing.keyset()


def context(step: Step, attempt: Attempt, args_sha256: str, keys: signing.KeySet | None = None) -> PerformContext:
    """What perform() is told about the effect it performs, under `attempt`
    (`keys`: the signing key set, when the caller read it for a batch)."""
    workflow = step.workflow
    extra = {"jti": attempt.proof_jti} if attempt.proof_jti else {}
    return PerformContext(
        workflow_id=str(step.workflow_id),
        revision=workflow.revision,
        plan_hash=attempt.plan_hash or step.bound_plan_hash,
        step=step.key,
        action=step.action,
        operation_key=step.operation_key,
        approvers=attempt.proof_approvers if attempt.proof_approvers is not None else approvers_of(step),
        policy_version=attempt.policy_version,
        args_sha256=args_sha256,
        kid=attempt.proof_kid,
        keys=keys,
        decisions_sha256=choices.Decisions(step).digest(),
        **extra,
    )
