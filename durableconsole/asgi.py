"""The web process in production: `gunicorn durableconsole.asgi -k asgi`
(docs/deploying.md#serving-the-console). Django runs as under WSGI, on a fixed pool of
`WEB_THREADS` threads; waiters of the wait endpoint are held as coroutines
(workflows.web.front). Its threads share a bounded pool of database
connections (DB_POOL, docs/deploying.md#database-connections)."""

import os

from a2wsgi import WSGIMiddleware
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableconsole.settings")
os.environ.setdefault("DB_POOL", "1")
django_application = get_wsgi_application()

from django.conf import settings  # noqa: E402  (configured by the line above)

from workflows.web.front import Front  # noqa: E402

application = Front(WSGIMiddleware(django_application, workers=settings.WEB_THREADS))
