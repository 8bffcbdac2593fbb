"""Imports fine and declares nothing: a forgotten @register."""

from workflows.actions import Action, Outcome


class Forgotten(Action):
    name = "empty.forgotten"

    def perform(self, args, operation_key):
        return Outcome(result={})
