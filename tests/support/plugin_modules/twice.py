from workflows.actions import Action, Outcome, register


@register
class First(Action):
    name = "twice.same"

    def perform(self, args, operation_key):
        return Outcome(result={})


@register
class Second(First):
    name = "twice.same"
