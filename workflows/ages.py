"""The one grammar of an age ("older than 90d"), read the same by the API,
the console's filter, `replay_dead_letters` and `archive`: a whole number
above zero and one unit, s, m, h or d. Nothing else is guessed (no bare
numbers, no fractions, no spaces): an age that reads two ways is refused."""

import re
from datetime import timedelta

from workflows.errors import DomainError

AGE = re.compile(r"^([0-9]+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
# A century: past it an age reaches before any date the database keeps.
LONGEST = timedelta(days=36500)
MESSAGE = "An age is a whole number above zero and a unit (s, m, h or d), at most 36500d: such as 30m, 12h or 90d."


class AgeInvalid(DomainError):
    code = "invalid"


def parse_age(text: str) -> timedelta:
    """`90d` -> 90 days; `AgeInvalid` (with MESSAGE) for anything else."""
    match = AGE.match(text or "")
    # The digits are bounded before they become a number: "99999999999d" is refused, not an overflow.
    if match is None or len(match[1]) > 9:
        raise AgeInvalid(MESSAGE)
    age = timedelta(**{UNITS[match[2]]: int(match[1])})
    if not timedelta(0) < age <= LONGEST:
        raise AgeInvalid(MESSAGE)
    return age
