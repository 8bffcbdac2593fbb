from workflows.actions import Action, Outcome, register


@register
class Sound(Action):
    name = "mixed.sound"
    idempotent = True
    in_process = True

    def perform(self, args, operation_key):
        return Outcome(result={"sound": True})
