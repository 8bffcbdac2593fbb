"""What `qcluster` loads before its step workers fork
(docs/deploying.md#what-runs): not Django's system checks, whose URL check
loads the whole URLconf and the JSON API's schemas with it, which no step
worker uses, nor django-ninja (not a listed app: settings.NINJA_DIR); the
messages lane, whose notices and chat messages carry links to the
console, forks after the URLconf is loaded.

Run in a process of its own, as a worker host runs it: this test process
has long loaded the URLconf. Each lane's start is replaced by a record of
what was loaded at that moment, so nothing forks."""

import json
import os
import subprocess
import sys
import textwrap

from django.conf import settings

SCRIPT = textwrap.dedent(
    """
    import json, sys, types
    import django
    django.setup()
    from django.conf import settings
    from workflows.management.commands import qcluster

    dead = types.SimpleNamespace(is_alive=lambda: False, join=lambda timeout=None: None)
    seen = {}

    def start_lane(lane):
        seen[lane] = {
            "urlconf": settings.ROOT_URLCONF in sys.modules,
            "api": "workflows.api" in sys.modules,
            "ninja": "ninja" in sys.modules,
        }
        if len(seen) == 2:
            print(json.dumps(seen))
            raise SystemExit(0)
        return types.SimpleNamespace(sentinel=dead, stop_event=None)

    qcluster.start_lane = start_lane
    from django.core.management import execute_from_command_line
    execute_from_command_line(["manage.py", "qcluster"])
    """
)


def test_step_workers_fork_before_the_urlconf_and_the_api_are_loaded_the_messages_lane_after():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "durableconsole.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "steps": {"urlconf": False, "api": False, "ninja": False},
        "messages": {"urlconf": True, "api": True, "ninja": True},
    }
