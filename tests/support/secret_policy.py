"""The secrets policy the audit tests give the ticket desk."""

from workflows.audit import secrets


def desk_policy(desk, *actions):
    return {"DESK_TOKEN": {"actions": list(actions), "hosts": [secrets.host_of(desk.url)]}}
