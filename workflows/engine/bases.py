"""Whether what approved a plan without a person still stands
(docs/explanation/policies.md#liveness).

A person's approval has no basis (`Approval.basis` is ""): the recheck
before each attempt asks whether that person may still approve. An
approval no person made names its basis, `<kind>:<rest>`, and counts only
while that basis is live. Each kind registers one function (`kind`) that
answers, for a batch of bases of that kind, which are no longer live and
why, in a fixed number of queries. A basis of no registered kind, or one
that does not parse, is never live: the recheck fails closed.

- `policy:<team>:<@id,...>@<version>`: live while that version is still
  the team's live policy set; once a newer version is authorized, the
  plans it approved stop before their next effect until a person approves
  them.
- `grant:<id>`: live while that standing grant is neither revoked nor
  past its time (docs/explanation/policies.md#standing-grants); used up, it
  still backs the steps it approved.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from django.utils import timezone

from workflows.models import PolicySet, StandingGrant
from workflows.models.grants import LIVE

# kind → function(bases of that kind) → {basis: why it is no longer live}
KINDS: dict[str, Callable[[list[str]], dict[str, str]]] = {}


def kind(name: str):
    """Register the liveness check of one kind of basis."""

    def register(check):
        KINDS[name] = check
        return check

    return register


def not_live(bases: Iterable[str]) -> dict[str, str]:
    """{basis: why} for each of `bases` that no longer stands."""
    by_kind: dict[str, list[str]] = {}
    found = {}
    for basis in set(bases):
        name, sep, _ = basis.partition(":")
        if not sep or name not in KINDS:
            found[basis] = "an approval basis the console does not know"
            continue
        by_kind.setdefault(name, []).append(basis)
    for name, batch in by_kind.items():
        found.update(KINDS[name](batch))
    return found


def live(basis: str) -> bool:
    return basis not in not_live([basis])


def parse_policy(basis: str) -> tuple[str, list[str], int] | None:
    """(team, @ids, version) of a `policy:` basis; None when it does not parse."""
    kind_name, _, rest = basis.partition(":")
    team, sep, tail = rest.partition(":")
    ids, at, version = tail.rpartition("@")
    if kind_name != "policy" or not (team and sep and ids and at and version.isdigit()):
        return None
    return team, ids.split(","), int(version)


@kind("policy")
def _policy_versions(bases: list[str]) -> dict[str, str]:
    parsed = {basis: parse_policy(basis) for basis in bases}
    teams = {found[0] for found in parsed.values() if found}
    current = dict(PolicySet.objects.filter(name__in=teams).values_list("name", "live_version"))
    dead = {}
    for basis, found in parsed.items():
        if found is None:
            dead[basis] = "an approval basis that does not parse"
            continue
        team, _, version = found
        now = current.get(team)
        if now != version:
            dead[basis] = (
                f"version {version} of {team}'s policy set is no longer live "
                f"({'version ' + str(now) + ' is' if now else 'none is'}): a person approves it again"
            )
    return dead


@kind("grant")
def _grants(bases: list[str]) -> dict[str, str]:
    ids = {}
    dead = {}
    for basis in bases:
        try:
            ids[basis] = uuid.UUID(basis.removeprefix("grant:"))
        except ValueError:
            dead[basis] = "an approval basis that does not parse"
    now = timezone.now()
    found = {
        pk: (status, until)
        for pk, status, until in StandingGrant.objects.filter(pk__in=set(ids.values())).values_list(
            "pk", "status", "until"
        )
    }
    for basis, pk in ids.items():
        status, until = found.get(pk, (None, None))
        if status is None:
            dead[basis] = f"standing grant {pk} is not known"
        elif status not in LIVE:
            dead[basis] = f"standing grant {pk} is {status}: a person approves it again"
        elif until <= now:
            dead[basis] = f"standing grant {pk} ended at {until:%Y-%m-%d %H:%M:%S} UTC: a person approves it again"
    return dead
