import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

from portal.serving import require_secret_key  # noqa: E402 (after set-up: it reads the settings)

require_secret_key()
