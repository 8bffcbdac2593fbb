"""Whether this cluster has been asked to stop (`manage.py drain`, SIGTERM).

A draining cluster claims nothing more, finishes the effects it has in
flight (each outcome recorded under its own fence, as always), and exits;
the work it did not claim stays due for the other clusters. The flag lives
in shared memory made at import, before the cluster forks, so the signal
the main process receives reaches every worker process's claim loop.
"""

import multiprocessing

_requested = multiprocessing.RawValue("b", 0)


def request() -> None:
    _requested.value = 1


def requested() -> bool:
    return bool(_requested.value)
