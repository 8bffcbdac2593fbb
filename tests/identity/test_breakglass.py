"""Break-glass (docs/explanation/decisions.md#bound-decisions): with local sign-in off, `manage.py breakglass
USER --hours N` lets one local account sign in with its password for N
hours; the grant and each of its sign-ins are audited; nobody else gets in,
and neither does it once the time is up."""

import io
import time

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from tests.support.personas import PASSWORD
from tests.support.seeing import Client
from tests.support.sso import sign_in, signed_in_user
from workflows.models import AuditEvent

BREAKGLASS_LOGIN = "/login/?breakglass=1"


@pytest.fixture
def local_off(sso_on, settings, people):
    settings.LOCAL_LOGIN = False
    return people


def breakglass(username, hours):
    out = io.StringIO()
    call_command("breakglass", username, "--hours", str(hours), stdout=out)
    return out.getvalue()


def password_sign_in(username):
    client = Client()
    answer = client.post(BREAKGLASS_LOGIN, {"username": username, "password": PASSWORD})
    return client, answer


def test_without_a_grant_no_password_gets_in(local_off):
    client, answer = password_sign_in("admin")
    assert answer.status_code == 403 and "LOCAL_LOGIN=0" in answer.content.decode()
    assert signed_in_user(client) is None
    assert 'name="password"' not in Client().get("/login/").content.decode()


def test_a_grant_lets_one_account_in_for_its_hours_each_sign_in_audited(local_off):
    assert "admin may sign in with a password until" in breakglass("admin", 2)
    grant = AuditEvent.objects.get(verb="user.breakglass")
    assert (grant.actor, grant.data["username"], grant.data["hours"]) == ("manage.py", "admin", 2.0)

    page = Client().get(BREAKGLASS_LOGIN).content.decode()
    assert 'name="password"' in page and "Break-glass sign-in" in page
    client, answer = password_sign_in("admin")
    assert answer.status_code == 302 and signed_in_user(client) == str(local_off["admin"].pk)
    assert client.get("/").status_code == 200
    signed = AuditEvent.objects.get(verb="user.signed_in", actor="admin")
    assert signed.data == {"via": "breakglass", "until": grant.data["until"]}
    password_sign_in("admin")
    assert AuditEvent.objects.filter(verb="user.signed_in", actor="admin").count() == 2

    # Only that account; and a wrong password still fails.
    other, refused = password_sign_in("reviewer")
    assert refused.status_code == 403 and signed_in_user(other) is None
    wrong = Client().post(BREAKGLASS_LOGIN, {"username": "admin", "password": "not-it"})
    assert wrong.status_code == 200 and "didn't match" in wrong.content.decode()
    assert AuditEvent.objects.filter(verb="user.signed_in", actor="admin").count() == 2


def test_a_grant_runs_out(local_off):
    breakglass("admin", 0.0005)  # 1.8 seconds
    assert password_sign_in("admin")[1].status_code == 302
    time.sleep(2)
    client, answer = password_sign_in("admin")
    assert answer.status_code == 403 and signed_in_user(client) is None


def test_a_grant_can_be_ended_early(local_off):
    breakglass("admin", 4)
    assert "break-glass sign-in has ended" in breakglass("admin", 0)
    assert password_sign_in("admin")[1].status_code == 403
    assert AuditEvent.objects.filter(verb="user.breakglass").count() == 2


@pytest.mark.parametrize("hours, says", [(25, "from 0 to 24 hours"), (-1, "from 0 to 24 hours")])
def test_a_grant_is_time_boxed(local_off, hours, says):
    with pytest.raises(CommandError, match=says):
        breakglass("admin", hours)
    assert not AuditEvent.objects.filter(verb="user.breakglass").exists()


def test_only_an_active_local_account_with_a_password_can_have_one(local_off, sso_on):
    sign_in(Client())  # alice: an SSO account
    with pytest.raises(CommandError, match="not a local account"):
        breakglass("alice", 1)
    User.objects.filter(username="operator").update(is_active=False)
    with pytest.raises(CommandError, match="deactivated"):
        breakglass("operator", 1)
    with pytest.raises(CommandError, match="No user named"):
        breakglass("nobody", 1)
    assert not AuditEvent.objects.filter(verb="user.breakglass").exists()


def test_with_local_login_on_sign_ins_are_not_break_glass(sso_on, settings, people):
    settings.LOCAL_LOGIN = True
    client = Client()
    assert client.post("/login/", {"username": "admin", "password": PASSWORD}).status_code == 302
    assert not AuditEvent.objects.filter(verb="user.signed_in", actor="admin").exists()
