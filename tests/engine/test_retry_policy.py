"""Bounded exponential backoff with full jitter, under one deadline."""

import random
from datetime import timedelta

from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from workflows.engine import retry


@given(attempt=st.integers(min_value=1, max_value=60), seed=st.integers())
def test_backoff_is_bounded_and_jittered(attempt, seed):
    delay = retry.backoff(attempt, rng=random.Random(seed))
    ceiling = min(retry.CAP_SECONDS, retry.BASE_SECONDS * 2 ** (attempt - 1))
    assert 0 <= delay <= ceiling


@given(attempt=st.integers(min_value=1, max_value=20), retry_after=st.floats(min_value=0, max_value=3600))
def test_retry_after_is_a_floor(attempt, retry_after):
    assert retry.backoff(attempt, retry_after) >= retry_after


def test_jitter_spreads_the_retries():
    delays = {round(retry.backoff(6, rng=random.Random(seed)), 6) for seed in range(50)}
    assert len(delays) > 40


def test_no_next_attempt_past_the_deadline_or_the_attempt_budget():
    now = timezone.now()
    assert retry.next_attempt_at(now, 1, now + timedelta(hours=1), None, max_attempts=5) > now
    assert retry.next_attempt_at(now, 5, now + timedelta(hours=1), None, max_attempts=5) is None
    assert retry.next_attempt_at(now, 1, now + timedelta(seconds=5), retry_after=10) is None
