"""The portal as an ASGI application, for gunicorn's uvicorn worker class in `make bench submit`."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
application = get_asgi_application()
