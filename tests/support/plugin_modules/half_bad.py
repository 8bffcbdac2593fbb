"""One sound class beside a broken one: neither is installed."""

from workflows.actions import Action, Outcome, register


@register
class Sound(Action):
    name = "half.sound"

    def perform(self, args, operation_key):
        return Outcome(result={})


@register
class Broken(Action):
    name = "half.broken"
