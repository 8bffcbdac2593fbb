"""A webhook signing secret, as an operator gets it from the command line."""

import io

from django.core.management import call_command


def secret_for(username: str, *options: str) -> str:
    out = io.StringIO()
    call_command("webhook_secret", username, *options, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()
