"""Accounts of one person, and agents' owners, for four-eyes only."""

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from workflows import persons, roles
from workflows.models import AccountLink, AgentOwner, AuditEvent
from workflows.operations import tokens


def test_accounts_are_their_own_person_until_linked(people):
    assert not persons.same(people["reviewer"], people["reviewer2"])
    call_command("person", "link", "reviewer", "reviewer2")
    assert persons.same(people["reviewer"], people["reviewer2"])
    assert AuditEvent.objects.filter(verb="person.linked").count() == 1


def test_linking_joins_two_groups_into_one_person(people):
    call_command("person", "link", "reviewer", "reviewer2")
    call_command("person", "link", "operator", "auditor")
    call_command("person", "link", "reviewer2", "auditor")
    assert len(set(AccountLink.objects.values_list("person", flat=True))) == 1
    assert persons.same(people["reviewer"], people["operator"])


def test_a_link_gives_no_roles(people):
    call_command("person", "link", "reviewer", "agent")
    agent = User.objects.get(username="agent")
    assert not roles.is_reviewer(agent)


def test_an_agent_counts_as_its_owner(people, capsys):
    call_command("issue_token", "agent", "--owner", "reviewer")
    assert AgentOwner.objects.get(agent=people["agent"]).owner == people["reviewer"]
    assert persons.same(people["agent"], people["reviewer"])
    assert not persons.same(people["agent"], people["reviewer2"])
    call_command("person", "show", "reviewer")
    assert "agents owned: agent" in capsys.readouterr().out


def test_an_agent_follows_its_owner_into_a_linked_person(people):
    call_command("issue_token", "agent", "--owner", "reviewer")
    call_command("person", "link", "reviewer", "reviewer2")
    assert persons.same(people["agent"], people["reviewer2"])


@pytest.mark.parametrize(
    "args, message",
    [
        (("link", "reviewer", "reviewer"), "one person with itself"),
        (("link", "reviewer", "nobody"), "No user named 'nobody'"),
    ],
)
def test_bad_links_are_refused_and_change_nothing(people, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("person", *args)
    assert not AccountLink.objects.exists()


def test_an_owner_must_be_a_person_and_exist(people):
    with pytest.raises(CommandError, match="No active user named 'ghost'"):
        call_command("issue_token", "agent", "--owner", "ghost")
    call_command("issue_token", "agent", "--owner", "reviewer")
    with pytest.raises(CommandError, match="an owner is a person"):
        call_command("issue_token", "operator", "--owner", "agent")


def test_a_suspended_token_does_not_authenticate(people):
    token = tokens.issue(people["agent"])
    assert tokens.authenticate(token) == people["agent"]
    people["agent"].api_tokens.update(suspended_at="2026-01-01T00:00:00Z")
    assert tokens.authenticate(token) is None
