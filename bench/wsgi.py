"""The portal as a WSGI application under bench.settings, for gunicorn's sync and gthread worker classes."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
application = get_wsgi_application()
