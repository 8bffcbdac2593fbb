"""Classes named one by one (`tests.support.plugin_modules.bad:NoName`), each with one problem."""

from workflows.actions import Action, Outcome


class Performs(Action):
    def perform(self, args, operation_key):
        return Outcome(result={})


class NoName(Performs):
    pass


class NoPerform(Action):
    name = "bad.no_perform"


class FlagNotBool(Performs):
    name = "bad.flag_not_bool"
    idempotent = "no"


class ArgsNotModel(Performs):
    name = "bad.args_not_model"
    Args = dict


class LookupMissing(Performs):
    name = "bad.lookup_missing"
    can_lookup = True


class CompensationMissing(Performs):
    name = "bad.compensation_missing"
    compensation = "bad.undo_that_nobody_wrote"


class BindingWithoutPreview(Performs):
    name = "bad.binding_without_preview"
    preview_binding = True


class NotAnAction:
    name = "bad.not_an_action"

    def perform(self, args, operation_key):
        return {}
