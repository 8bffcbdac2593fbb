"""`make run`'s demo: every role finds something to do, brought there by
the real operations, and the banner's commands run as printed from the
repository's root in a fresh shell."""

import os
import re
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from tests.support.processes import PROJECT_DIR
from workflows import roles
from workflows.audit import journal
from workflows.models import AuditEvent, Compensation, DeadLetter, Step, Workflow
from workflows.operations import compensation, deadletters, resolution
from workflows.operations import gates as gate_decisions
from workflows.operations.deciding import Seen
from workflows.ops import demo
from workflows.states import StepStatus, WorkflowStatus


def person(name):
    return User.objects.get(username=name)


@pytest.mark.django_db(transaction=True)
def test_the_seeded_demo_gives_every_role_something_to_do():
    demo.seed()
    reviewer, operator, auditor = person("reviewer"), person("operator"), person("auditor")
    # The reviewer: plans awaiting review, a gate to pass, a compensation to authorize.
    assert Workflow.objects.visible_to(reviewer).filter(status=WorkflowStatus.PLANNED).count() == len(demo.SAMPLES)
    (gated,) = Workflow.objects.visible_to(reviewer).filter(status=WorkflowStatus.WAITING_GATE)
    (comp,) = Compensation.objects.visible_to(reviewer).filter(status="REQUESTED")
    # The operator: a dead letter to replay, an IN_DOUBT step to resolve.
    (letter,) = DeadLetter.objects.visible_to(operator).filter(status=DeadLetter.Status.OPEN)
    (doubt,) = Step.objects.filter(status=StepStatus.IN_DOUBT, workflow__in=Workflow.objects.visible_to(operator))
    assert letter.failure_class == "INVALID_ARGUMENTS" and doubt.workflow.status == WorkflowStatus.NEEDS_ATTENTION
    # The auditor: the history of all of it, a chain that verifies.
    assert AuditEvent.objects.filter(verb="dead_letter.created").exists()
    assert AuditEvent.objects.filter(verb="compensation.requested").exists()
    assert journal.verify().ok
    assert [role for role, _, _ in demo.tasks()] == ["reviewer"] * 3 + ["operator"] * 2 + ["auditor"]
    assert roles.is_auditor(auditor)

    # Seeding again while all of it waits adds nothing.
    before = Workflow.objects.count()
    demo.seed()
    assert Workflow.objects.count() == before

    # Each can be done by its role, as the console would do it.
    gate_decisions.approve(gated, "announce", by=reviewer, seen=Seen.current(gated, gate_step="announce"))
    compensation.authorize(comp, by=reviewer, seen=Seen(plan_hash=compensation.current_hash(comp)))
    deadletters.replay(letter, by=operator, reason="The desk accepts the ticket again.")
    resolution.resolve(doubt, by=operator, decision="not_happened", reason="The status page has no such deploy.")
    assert not demo.waiting_gates().exists() and not demo.requested_compensations().exists()
    assert not demo.open_dead_letters().exists() and not demo.in_doubt_steps().exists()
    # Once done, seeding again stages each anew.
    demo.seed()
    assert demo.waiting_gates().count() == demo.open_dead_letters().count() == 1
    assert demo.in_doubt_steps().count() == demo.requested_compensations().count() == 1
    assert Workflow.objects.filter(submission_key="demo-dead-letter-2").exists()


def test_the_banner_commands_run_as_printed(tmp_path):
    # `make run` from a plain shell: DEBUG and where the demo keeps its database, nothing of the test run's.
    demo_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DEBUG": "1", "VAR_DIR": str(tmp_path)}

    def manage(*args):
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=PROJECT_DIR, env=demo_env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    manage("migrate", "--verbosity", "0")
    manage("seed_demo")
    text = manage(
        "shell",
        "-c",
        "from workflows.management.commands.rundemo import banner; print(banner('127.0.0.1:8000', 8100))",
    )
    assert "a dead letter to replay" in text and "an IN_DOUBT step to resolve" in text
    commands = re.findall(r"\$ (.+)$", text, re.MULTILINE)
    assert len(commands) >= 2 and any("issue_token agent" in command for command in commands)
    # A fresh shell at the repository's root: none of this process's settings.
    fresh = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for command in commands:
        ran = subprocess.run(["bash", "-c", command], cwd=PROJECT_DIR, env=fresh, capture_output=True, text=True)
        assert ran.returncode == 0, f"{command}\n{ran.stderr}"
        assert ran.stdout.strip(), command
    # The token was issued into the demo's own database.
    tokens = manage("shell", "-c", "from workflows.models import ApiToken; print(ApiToken.objects.count())")
    assert tokens.split()[-1] == "1"


def test_make_run_takes_its_ports_from_port_and_desk_port():
    def run_line(*args, **env):
        shown = subprocess.run(
            ["make", "--dry-run", "--always-make", "run", *args],
            cwd=PROJECT_DIR,
            env={**{k: v for k, v in os.environ.items() if k not in ("PORT", "DESK_PORT")}, **env},
            capture_output=True,
            text=True,
        )
        assert shown.returncode == 0, shown.stderr
        return next(line for line in shown.stdout.splitlines() if "rundemo" in line)

    assert run_line().endswith("rundemo --web 127.0.0.1:8000 --desk-port 8100")
    assert run_line(PORT="9000", DESK_PORT="9100").endswith("rundemo --web 127.0.0.1:9000 --desk-port 9100")
    assert run_line("PORT=9001").endswith("rundemo --web 127.0.0.1:9001 --desk-port 8100")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--web", "127.0.0.1:abc"], "a port is a whole number from 1 to 65535, not 'abc'"),
        (["--web", "127.0.0.1:0"], "not '0'"),
        (["--desk-port", "99999"], "not '99999'"),
        (["--desk-port", "٣"], "not '٣'"),
        (["--web", "8000"], "--web is HOST:PORT, not '8000'"),
    ],
)
def test_bad_ports_are_refused_before_anything_starts(db, args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("rundemo", *args)
    assert not Workflow.objects.exists()  # not even seeded
