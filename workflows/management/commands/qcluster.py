"""`qcluster`: django-q2's cluster plus the project's recovery loop."""

import os
import signal

from django.conf import settings
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as QClusterCommand

from workflows import telemetry
from workflows.audit import keys, signing
from workflows.engine import draining, worker


class Command(QClusterCommand):
    help = "Starts the worker cluster and its recovery loop."

    def handle(self, *args, **options):
        _ = settings.SECRET_KEY  # signing needs it: fail before forking anything
        keys.current()  # and the audit chain and its checkpoints their keys
        signing.current()
        # Before the cluster forks: its workers inherit the tracer provider
        # and the instrumentations (the span processor's export thread is
        # started again in each child).
        telemetry.setup()
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = Cluster()
        cluster.start()
        if options.get("run_once"):
            cluster.stop()
            return
        stopping = []

        # django-q2's own handler can block forever on an Event that the
        # sentinel held when a signal to the whole process group killed it.
        # Here a signal only ends the loop; then the sentinel, if still alive,
        # is asked to stop gracefully, and killed if it does not.
        # A signal also drains: the workers claim nothing more and finish the
        # effects they have in flight before the sentinel stops them.
        def stop(*_):
            draining.request()
            stopping.append(True)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        worker.loop(lambda: not stopping and cluster.sentinel.is_alive())
        sentinel = cluster.sentinel
        if sentinel.is_alive():
            cluster.stop_event.set()
            sentinel.join(settings.Q_CLUSTER["timeout"] + 5)
        if sentinel.is_alive():
            sentinel.kill()
