"""What this thread's connection does while the bench watches: the
statements it runs and the commits it makes (the protocol's cost per step
in (b), the queries of a page in (e))."""

from __future__ import annotations

from contextlib import contextmanager

from django.db import connection


@contextmanager
def recording_queries():
    """The statements this thread's connection runs (Django's debug log keeps
    at most 9,000 and costs time on every query)."""
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


@contextmanager
def counting_commits():
    """Count the commits of this thread's connection (an outermost
    transaction.atomic ends in connection.commit())."""
    counter = {"commits": 0}
    commit = connection.commit

    def counted():
        counter["commits"] += 1
        commit()

    connection.commit = counted
    try:
        yield counter
    finally:
        del connection.commit
