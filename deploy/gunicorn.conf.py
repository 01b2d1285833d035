"""gunicorn for Gridlane's web processes, two kinds from the one file:

- the portal and its API: `gunicorn -c deploy/gunicorn.conf.py portal.wsgi` (gthread: a slow request, a log
  read over SSH say, holds one thread and not a whole process; a tier serving mostly the API's submits does
  better with sync and one process a core, as measured in deploy/gridlane.env);
- the connect path (notebooks and apps through the portal: long-lived requests and WebSockets):
  `gunicorn -c deploy/gunicorn.conf.py portal.asgi:application` with GRIDLANE_WEB_WORKER_CLASS set to
  uvicorn_worker.UvicornWorker (deploy/systemd/gridlane-connect.service). The front proxy sends /connect/
  there (deploy/nginx).

Every value comes from the environment (deploy/gridlane.env lists them), with defaults for a two-core host.
"""

import os

bind = os.environ.get("GRIDLANE_BIND", "127.0.0.1:8000").split(",")
worker_class = os.environ.get("GRIDLANE_WEB_WORKER_CLASS", "gthread")
workers = int(os.environ.get("GRIDLANE_WEB_WORKERS", "2"))
threads = int(os.environ.get("GRIDLANE_WEB_THREADS", "4"))  # gthread only
# A request that takes longer is cut (and logged); the API answers in milliseconds, pages in well under this.
timeout = int(os.environ.get("GRIDLANE_WEB_TIMEOUT", "60"))
graceful_timeout = 30
keepalive = 5
# Recycle a process now and then, spread out so that never all at once.
max_requests = int(os.environ.get("GRIDLANE_WEB_MAX_REQUESTS", "5000"))
max_requests_jitter = max_requests // 10
# gunicorn itself believes X-Forwarded-Proto only from the front proxy; Django does the same for the other
# forwarded headers (portal.serving.ForwardedMiddleware with GRIDLANE_TRUSTED_PROXIES).
forwarded_allow_ips = os.environ.get("GRIDLANE_TRUSTED_PROXIES", "127.0.0.1")
# Heartbeat files in memory, not on a disk that may stall (gunicorn's advice for containers and VMs).
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108 (a fixed system path)
accesslog = "-"
errorlog = "-"
# The request id (X-Request-ID, set on every response) ties an access line to the application's log lines.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms rid=%({x-request-id}o)s'
