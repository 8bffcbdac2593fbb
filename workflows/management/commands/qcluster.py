"""`qcluster`: django-q2's clusters, one per queue lane, plus the project's
recovery loop."""

import os
import signal
import threading
from importlib import import_module

from django.conf import settings
from django.core.management.base import CommandError
from django_q.brokers import get_broker
from django_q.cluster import Cluster
from django_q.conf import Conf
from django_q.management.commands.qcluster import Command as QClusterCommand

from workflows import queue, telemetry
from workflows.audit import keys, signing
from workflows.engine import draining, worker


def start_lane(lane: str) -> Cluster:
    """A django-q2 cluster (sentinel, pusher, monitor, workers) serving one
    lane's queue (docs/explanation/architecture.md#queue-lanes). django-q2
    sizes a cluster's pool from `Conf.WORKERS` when its sentinel starts, in
    the sentinel's process, which it forks; so the messages lane's pool size
    is set for the fork and put back once the sentinel has started (its
    workers are up). Only the steps lane runs django-q2's scheduler, as a
    single cluster did."""
    if lane == queue.STEPS:
        cluster = Cluster()
        cluster.start()
        return cluster
    cluster = Cluster(get_broker(queue.lane_key(lane)))
    saved = Conf.WORKERS, Conf.SCHEDULER
    Conf.WORKERS, Conf.SCHEDULER = queue.workers(lane), False
    try:
        cluster.start()
    finally:
        Conf.WORKERS, Conf.SCHEDULER = saved
    return cluster


class Command(QClusterCommand):
    help = "Starts the worker clusters (the steps lane and the messages lane) and their recovery loop."
    # Django's system checks are a deployment's (`manage.py check --deploy`,
    # docs/deploying.md), not each worker start's: their URL check loads
    # the whole URLconf, the JSON API's schemas with it, which no step
    # worker uses (a third of the time from start to the first effect).
    # The one check of the project's own, plugins left out, is logged by
    # `plugins.discover` in every process.
    requires_system_checks = []

    def handle(self, *args, **options):
        if settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
            # The workers are forked: a pool's threads and sockets would not survive it.
            raise CommandError(
                "DB_POOL is for web processes; a cluster holds its own connections "
                "(WORKER_DB_CONNECTIONS, docs/deploying.md#database-connections): unset DB_POOL for qcluster"
            )
        _ = settings.SECRET_KEY  # signing needs it: fail before forking anything
        keys.current()  # and the audit chain and its checkpoints their keys
        signing.current()
        # Before the cluster forks: its workers inherit the tracer provider
        # and the instrumentations (the span processor's export thread is
        # started again in each child).
        telemetry.setup()
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        clusters = []
        stopping = []

        # django-q2's own handler can block forever on an Event that the
        # sentinel held when a signal to the whole process group killed it.
        # Here a signal only ends the loop; then each sentinel, if still
        # alive, is asked to stop gracefully, and killed if it does not.
        # A signal also drains: the workers claim nothing more and finish the
        # effects they have in flight before the sentinels stop them.
        def stop(*_):
            draining.request()
            stopping.append(True)

        try:
            for lane in (queue.STEPS, queue.MESSAGES):
                if lane == queue.MESSAGES:
                    # Notices and chat messages carry links to the console:
                    # its URLconf is loaded once, here, for the messages
                    # lane's workers to inherit, after the step workers have
                    # forked without it.
                    import_module(settings.ROOT_URLCONF)
                clusters.append(start_lane(lane))
                # Each Cluster() installs django-q2's handler: put ours back at once.
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, stop)
            if not options.get("run_once"):
                worker.loop(lambda: not stopping and all(cluster.sentinel.is_alive() for cluster in clusters))
        finally:
            _stop(clusters)


def _stop(clusters: list[Cluster]) -> None:
    """Ask every lane's sentinel to stop at once (their workers finish in
    parallel), then wait for each; kill one that does not stop."""
    for cluster in clusters:
        if cluster.sentinel.is_alive():
            set_event(cluster.stop_event)
    for cluster in clusters:
        cluster.sentinel.join(settings.Q_CLUSTER["timeout"] + 5)
        if cluster.sentinel.is_alive():
            cluster.sentinel.kill()


def set_event(event, timeout: float = 2.0) -> bool:
    """Set a multiprocessing Event without hanging on a dead process.
    `Event.set()` waits until every process sleeping on the event has woken;
    a sentinel killed while it slept (a signal to the cluster's whole process
    group kills it, django-q2 leaves it SIGTERM's default) never wakes, and
    the wait would last for ever. So the event is set from a daemon thread
    and waited on for `timeout` at most: a live sentinel wakes at once, a dead
    one needs no telling. True when the set completed."""
    setter = threading.Thread(target=event.set, name="stop-event", daemon=True)
    setter.start()
    setter.join(timeout)
    return not setter.is_alive()
