"""Durable Console: the app. One subpackage per concern, dependencies
pointing one way (tests/ops/test_layout.py keeps it so):

    ops, management/commands   bench, chaos soak, process helpers; the commands
        -> web                 console views and URLs, the JSON API
        -> operations          what people do: submit, approve, compensate, replay, resolve
        -> engine              states moving, claims, the checkpoint protocol, recovery
        -> actions, audit      the effects' interface; the audit trail, keys, redaction
        -> models, states, roles, errors

`tasks` holds the django-q2 entry points (stored by dotted path in queued
rows, so it stays `workflows.tasks`); `ticketdesk` is the demo external
system and imports nothing else of the project.
"""
