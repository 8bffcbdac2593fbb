"""Two connections at once: work on a thread of its own, and a transaction
that holds row locks while the test acts from another connection."""

import threading

from django.db import connections, transaction


def in_thread(fn):
    """Run `fn` on its own connection; returns the thread and a list that
    receives its result."""
    result = []

    def run():
        try:
            result.append(fn())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def holding(locks_taken, release):
    """A transaction that takes `locks_taken()` and holds them until `release`."""
    held = threading.Event()

    def hold():
        with transaction.atomic():
            locks_taken()
            held.set()
            release.wait(30)

    thread, _ = in_thread(hold)
    assert held.wait(10)
    return thread
