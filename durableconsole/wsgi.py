"""The WSGI entry point (`gunicorn durableconsole.wsgi`, development): its
threads share a bounded pool of database connections (DB_POOL,
docs/deploying.md#database-connections)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableconsole.settings")
os.environ.setdefault("DB_POOL", "1")
application = get_wsgi_application()
