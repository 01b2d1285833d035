"""The portal's settings with the echo view added, as `make bench submit` serves them; database connections
kept open between requests and checked before reuse, as production runs them."""

import os

from portal.settings import *  # noqa: F403
from portal.settings import DATABASES

ROOT_URLCONF = "bench.urls"
# Under ASGI, Django's docs advise against persistent connections (each request's thread would keep its own).
DATABASES["default"]["CONN_MAX_AGE"] = 0 if os.environ.get("GRIDLANE_BENCH_ASGI") else 60
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
