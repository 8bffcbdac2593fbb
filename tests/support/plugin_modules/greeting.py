from pydantic import BaseModel, ConfigDict, Field

from workflows.actions import Action, Outcome, register


class GreetingArgs(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    name: str = Field(min_length=1, max_length=80)


@register
class Greet(Action):
    name = "greeting.say"
    Args = GreetingArgs
    idempotent = True
    in_process = True

    def perform(self, args, operation_key):
        return Outcome(result={"greeting": f"Hello, {args['name']}"})
