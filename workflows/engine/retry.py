"""When, if ever, to try a failed step again."""

import random
from datetime import datetime, timedelta

from workflows.env import env_float, env_int

BASE_SECONDS = env_float(
    "RETRY_BASE_SECONDS", 0.5, minimum=0.0, help="First retry delay of a step; doubled each attempt, with full jitter."
)
CAP_SECONDS = env_float("RETRY_CAP_SECONDS", 30.0, minimum=0.0, help="Longest delay between two attempts of a step.")
MAX_ATTEMPTS = env_int(
    "RETRY_MAX_ATTEMPTS",
    5,
    minimum=1,
    help="Attempts of a step before it is dead-lettered (an action policy may set its own).",
)


def backoff(attempt_number: int, retry_after: float | None = None, *, rng=random) -> float:
    """Bounded exponential backoff with full jitter; a server's Retry-After
    is a floor, never shortened by the jitter."""
    ceiling = min(CAP_SECONDS, BASE_SECONDS * (2 ** max(0, attempt_number - 1)))
    delay = rng.uniform(0, ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay


def next_attempt_at(
    now: datetime, attempt_number: int, deadline: datetime, retry_after: float | None, max_attempts: int = MAX_ATTEMPTS
) -> datetime | None:
    """The due time of the next attempt, or None when the budget is spent:
    attempts exhausted, or the wait would end past the operation's deadline."""
    if attempt_number >= max_attempts:
        return None
    due = now + timedelta(seconds=backoff(attempt_number, retry_after))
    if due >= deadline:
        return None
    return due


__all__ = ["backoff", "next_attempt_at"]
