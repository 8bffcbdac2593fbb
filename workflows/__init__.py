"""Durable Console: the app. One subpackage per concern, dependencies
pointing one way (tests/ops/test_layout.py states the layer of every part and
keeps it so), from the top:

    management/commands, apps     the commands; the app's start-up
    ops                           bench, chaos soak, demo, process helpers
    web, api, tasks               console views and URLs, the JSON API, the queue's tasks
    operations                    what people do: submit, approve, compensate, replay, resolve
    engine, shapes                states moving, claims, the checkpoint protocol, recovery
    actions                       the effects' interface
    webhooks                      endpoints, their keys, sending the outbox's rows
    outbox                        events written with the change they report
    queue, telemetry              wake-ups and the brokers; tracing
    audit, persons                the audit trail, keys, redaction, archives
    models                        the tables
    teams, roles, states, errors, env, db

`tasks` holds the django-q2 entry points (stored by dotted path in queued
rows, so it stays `workflows.tasks`); `ticketdesk` is the demo external
system and imports nothing else of the project. Of durableconsole, only the
proof verifier (`durableconsole.proof`) is imported here.
"""
