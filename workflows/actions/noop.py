"""`noop`: the in-process action of tests, demos and benchmarks."""

from __future__ import annotations

from workflows.actions.base import Action, Outcome
from workflows.actions.registry import register


@register
class Noop(Action):
    """In-process and effect-free: for tests, demos and benchmarks. It takes
    any object (the default `Args`), and its result echoes it."""

    name = "noop"
    idempotent = True
    in_process = True
    compensation = "noop"

    def perform(self, args, operation_key):
        return Outcome(result=dict(args))

    def compensation_args(self, args, result):
        return dict(args)
