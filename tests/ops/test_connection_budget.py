"""How many connections a worker cluster may hold is declared
(WORKER_DB_CONNECTIONS) and checked against its worker counts before any
process starts; the web's pool is the web's alone
(docs/deploying.md#database-connections)."""

import pytest
from django.db import connection

from tests.support.processes import manage
from workflows.ops.processes import database_url

pytestmark = pytest.mark.django_db


def test_worker_counts_that_could_exceed_the_clusters_connections_are_refused():
    refused = manage("check", Q_WORKERS="20", Q_MESSAGE_WORKERS="1")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr
    assert "holds up to 50 database connections, more than WORKER_DB_CONNECTIONS=32" in refused.stderr

    allowed = manage("check", Q_WORKERS="20", Q_MESSAGE_WORKERS="1", WORKER_DB_CONNECTIONS="50")
    assert allowed.returncode == 0, allowed.stderr
    assert manage("check", Q_WORKERS="2", Q_MESSAGE_WORKERS="1").returncode == 0


def test_a_cluster_refuses_to_start_with_the_webs_pool():
    """django-q2 forks the workers: a pool's threads and sockets would not follow."""
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's; on SQLite DB_POOL changes nothing")
    started = manage("qcluster", DATABASE_URL=database_url(), DB_POOL="1")
    assert started.returncode != 0
    assert "DB_POOL is for web processes" in started.stderr
