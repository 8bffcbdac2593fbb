"""`qcluster`: django-q2's cluster plus the project's recovery loop."""

import os

from django.conf import settings
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as QClusterCommand

from workflows import worker


class Command(QClusterCommand):
    help = "Starts the worker cluster and its recovery loop."

    def handle(self, *args, **options):
        settings.SECRET_KEY  # signing needs it: fail before forking anything
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = Cluster()
        cluster.start()
        if options.get("run_once"):
            cluster.stop()
            return
        worker.loop(lambda: cluster.sentinel is not None and cluster.sentinel.is_alive())
