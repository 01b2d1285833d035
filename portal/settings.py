"""Settings from the environment, with safe defaults for the embedded mode (SQLite under var/)."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from django.core.management.utils import get_random_secret_key

django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GRIDLANE_VAR_DIR", BASE_DIR / "var"))


def env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _secret_key() -> str:
    """The configured key; in demo mode, one kept in var/ so sessions survive restarts of a laptop install.

    Outside demo mode there is no default: every web process and worker must share the one key IT sets, so an
    unset key stays empty here and the web and the worker refuse to start (portal.checks.require_secret_key)."""
    if key := os.environ.get("GRIDLANE_SECRET_KEY"):
        return key
    if not DEMO:
        return ""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(get_random_secret_key())
        path.chmod(0o600)
    return path.read_text().strip()


DEMO = env_flag("GRIDLANE_DEMO")
DEBUG = env_flag("GRIDLANE_DEBUG")
SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("GRIDLANE_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("GRIDLANE_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_q",
    "django_htmx",
    "portal.counters",
    "portal.accounts",
    "portal.queues",
    "portal.workloads",
    "portal.worker",
    "portal.usage",
    "portal.objectives",
    "portal.dashboards",
    "portal.agents",
    "portal.burst",
    "portal.whatif",
    "portal.notify",
    "portal.budgets",
    "portal.connect",
    "portal.code",
    "portal.policy",
    "portal.api",
]

MIDDLEWARE = [
    "portal.serving.RequestIdMiddleware",
    "portal.serving.ForwardedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.accounts.audit.AuditContextMiddleware",
    "portal.accounts.security.SecurityHeadersMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.gridlane",
                "portal.docs.help.help_link",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'gridlane.sqlite3'}"),
        conn_max_age=int(os.environ.get("GRIDLANE_DB_CONN_MAX_AGE", "60")),
        # A kept connection is checked before a request uses it: one that died (a database restart) is
        # replaced instead of failing the request.
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["ENGINE"] = "portal.database"  # Django's, with a check that sends no statement
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The web server and the worker share one file: WAL lets readers run beside a writer, and
    # IMMEDIATE transactions take the write lock up front instead of failing half-way through.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Sign-in: an OpenID Connect provider; local accounts (passwords) only in demo mode. Both backends load
# the session's user with its service identity in one query, and refuse agents (they use tokens).
AUTHENTICATION_BACKENDS = [
    *(["portal.accounts.oidc.LocalBackend"] if DEMO else []),
    "portal.accounts.oidc.Backend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "workloads:list"
LOGOUT_REDIRECT_URL = "login"

# --- OpenID Connect (mozilla-django-oidc; see portal/accounts/oidc.py) ---------------------------------
# Set the issuer (or the discovery URL), client id and secret; endpoints come from discovery at the first
# sign-in unless given one by one. Claim names say where the username, email and groups are.
_OIDC_ISSUER = os.environ.get("GRIDLANE_OIDC_ISSUER", "").rstrip("/")
GRIDLANE_OIDC = {
    "ISSUER": _OIDC_ISSUER,
    "DISCOVERY_URL": os.environ.get("GRIDLANE_OIDC_DISCOVERY_URL")
    or (f"{_OIDC_ISSUER}/.well-known/openid-configuration" if _OIDC_ISSUER else ""),
    "END_SESSION_ENDPOINT": os.environ.get("GRIDLANE_OIDC_END_SESSION_ENDPOINT", ""),
    "USERNAME_CLAIM": os.environ.get("GRIDLANE_OIDC_USERNAME_CLAIM", "preferred_username"),
    "EMAIL_CLAIM": os.environ.get("GRIDLANE_OIDC_EMAIL_CLAIM", "email"),
    "GROUPS_CLAIM": os.environ.get("GRIDLANE_OIDC_GROUPS_CLAIM", "groups"),
    "PROVIDER_NAME": os.environ.get("GRIDLANE_OIDC_PROVIDER_NAME", "single sign-on"),
}
OIDC_RP_CLIENT_ID = os.environ.get("GRIDLANE_OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = os.environ.get("GRIDLANE_OIDC_CLIENT_SECRET", "")
OIDC_RP_SCOPES = os.environ.get("GRIDLANE_OIDC_SCOPES", "openid email profile groups")
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_OP_AUTHORIZATION_ENDPOINT = os.environ.get("GRIDLANE_OIDC_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = os.environ.get("GRIDLANE_OIDC_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = os.environ.get("GRIDLANE_OIDC_USERINFO_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = os.environ.get("GRIDLANE_OIDC_JWKS_URI", "")
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = True  # the hint that lets sign-out end the provider's session too
OIDC_TIMEOUT = 10
OIDC_REDIRECT_REQUIRE_HTTPS = not DEMO

# Submissions per identity: a fixed window counted in the database (agents use their own per-minute limit).
GRIDLANE_SUBMIT_RATE_LIMIT = int(os.environ.get("GRIDLANE_SUBMIT_RATE_LIMIT", "30"))
GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS = int(os.environ.get("GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS", "60"))
# The longest an agent (service identity) may live before a lead or IT renews it.
GRIDLANE_AGENT_MAX_DAYS = int(os.environ.get("GRIDLANE_AGENT_MAX_DAYS", "365"))
# The portal's address as jobs on a cluster's nodes reach it (a notebook reports its server there).
GRIDLANE_PUBLIC_URL = os.environ.get("GRIDLANE_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")

# The currency the fabrics' prices are in, as the chargeback names it (e.g. "EUR"; empty: not named).
GRIDLANE_CURRENCY = os.environ.get("GRIDLANE_CURRENCY", "").strip()[:8]

# The connect proxy (portal.connect): seconds to open a connection to a job's server, and for its answer once
# the request is sent; the largest WebSocket message passed on (Jupyter's outputs can be large).
GRIDLANE_CONNECT_TIMEOUT_S = float(os.environ.get("GRIDLANE_CONNECT_TIMEOUT_S", "10"))
GRIDLANE_CONNECT_ANSWER_S = float(os.environ.get("GRIDLANE_CONNECT_ANSWER_S", "120"))
# Networks a job's reported web server may be on beyond its fabric's own nodes (what the fabric reports its jobs
# run on, its agents' hosts; the portal host for the local fabric), e.g. "10.30.0.0/16"; empty: those nodes only.
GRIDLANE_CONNECT_NETWORKS = [n.strip() for n in os.environ.get("GRIDLANE_CONNECT_NETWORKS", "").split(",") if n.strip()]
# How long one request's access decision is kept for the next ones with the same sign-in (a page loads dozens
# of files at once): signing out or a sharing switched off takes effect within this.
GRIDLANE_CONNECT_DECISION_S = float(os.environ.get("GRIDLANE_CONNECT_DECISION_S", "2"))
GRIDLANE_CONNECT_WS_MAX_BYTES = int(os.environ.get("GRIDLANE_CONNECT_WS_MAX_BYTES", str(64 * 1024 * 1024)))

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "portal.dashboards.finders.PlotlyFinder",  # static/vendor/plotly.min.js, from an installed package (no CDN)
]
WHITENOISE_USE_FINDERS = True  # serve straight from the apps in development and tests, no collectstatic
if not DEMO and not DEBUG:
    # Production: `manage.py collectstatic` writes compressed copies under content-hashed names, which
    # whitenoise serves with a year-long immutable Cache-Control; pages name them through the manifest.
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    WHITENOISE_USE_FINDERS = False

# Requests bigger than this are refused before a view sees them (a command or script is at most 64 KiB).
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.JSONParser",  # bounded size and depth, UTF-8 only: 400 or 413, never a 500
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Gridlane API",
    "DESCRIPTION": "One front door to GPU compute: queues, workloads, usage.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# django-q2 on the ORM broker: no extra service for the embedded mode.
Q_CLUSTER = {
    "name": "gridlane",
    "orm": "default",
    "workers": int(os.environ.get("GRIDLANE_Q_WORKERS", "2")),
    "timeout": 120,
    "retry": 180,
    # How often the ORM broker looks for tasks. On SQLite a submit's kick is one: often. PostgreSQL kicks by
    # NOTIFY, and the broker carries only the periodic cycle and what-if runs: a look every 20th of a second cost
    # an idle cluster 3.5 % of a core with PostgreSQL, every half second 0.8 %.
    "poll": float(
        os.environ.get("GRIDLANE_Q_POLL", "0.5" if DATABASES["default"]["ENGINE"] == "portal.database" else "0.05")
    ),
    "catch_up": False,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": 200,
    "label": "Worker tasks",
}

# How often the worker runs a scheduling cycle even when nothing asked for one.
GRIDLANE_CYCLE_SECONDS = float(os.environ.get("GRIDLANE_CYCLE_SECONDS", "2"))
# How often the periodic cycle asks each fabric for its capacity (nodes up, agents online). The scheduler plans
# with the lower of that and IT's declaration while the answer is at most three times this old.
GRIDLANE_CAPACITY_SECONDS = float(os.environ.get("GRIDLANE_CAPACITY_SECONDS", "30"))
# Work waiting in a fabric's own queue this long, while another target of its queue could start it now, is moved.
GRIDLANE_PULLBACK_PATIENCE_SECONDS = float(os.environ.get("GRIDLANE_PULLBACK_PATIENCE_SECONDS", "300"))
# Route on what fabrics have free now (soonest start, pull back); "0": every fabric is planned with IT's declaration
# alone and nothing is moved, as before live routing (fabrics are still observed for IT's pages).
GRIDLANE_LIVE_ROUTING = os.environ.get("GRIDLANE_LIVE_ROUTING", "1") != "0"
# Fair share: the weights of P = age*ln(1+wait) + share*(1-U/L) + qos*Q - size*(gpus/cluster_gpus)
# - runtime*ln(1+limit_s*gpus), e.g. GRIDLANE_PRIORITY_WEIGHTS="age=0.5,share=2,qos=3,size=1,runtime=1", and the
# half-life over which past use (U) fades.
GRIDLANE_PRIORITY_WEIGHTS = {
    k.strip(): float(v)
    for k, v in (p.split("=", 1) for p in os.environ.get("GRIDLANE_PRIORITY_WEIGHTS", "").split(",") if "=" in p)
}
# Per team, queue and priority tier, how many of the oldest pending workloads one cycle considers.
GRIDLANE_CANDIDATES_PER_QUEUE = int(os.environ.get("GRIDLANE_CANDIDATES_PER_QUEUE", "256"))
# A dry run reuses the last snapshot its process built for up to this many seconds (portal.worker.dryrun).
GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS = float(os.environ.get("GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS", "2"))
# Code that travels with jobs (portal.code): where uploaded bundles are kept, and the most a bundle may hold,
# packed or unpacked (a bigger one is refused with 413).
GRIDLANE_CODE_DIR = Path(os.environ.get("GRIDLANE_CODE_DIR", VAR_DIR / "code"))
GRIDLANE_CODE_MAX_MB = float(os.environ.get("GRIDLANE_CODE_MAX_MB", "100"))

GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS = float(os.environ.get("GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS", "24"))
# Where the local fabric keeps its job folders unless a fabric's settings say otherwise.
GRIDLANE_LOCAL_FABRIC_ROOT = Path(os.environ.get("GRIDLANE_LOCAL_FABRIC_ROOT", VAR_DIR / "local-fabric"))
# Idle notebooks (a queue's notebook idle limit): how long before the stop a notebook is warned, at most a
# sixth of the limit; and the length of the minute these are counted in (only tests shorten it).
GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES = float(os.environ.get("GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES", "10"))
GRIDLANE_IDLE_MINUTE_S = 60.0
# GPU utilisation from jobs' own samplers (portal.usage.samples): how often a job samples its GPUs, and the
# least time between two samples the portal takes of one workload (more are answered 429 and counted).
GRIDLANE_SAMPLE_SECONDS = max(5.0, float(os.environ.get("GRIDLANE_SAMPLE_SECONDS", "30")))
GRIDLANE_SAMPLE_MIN_INTERVAL_S = float(os.environ.get("GRIDLANE_SAMPLE_MIN_INTERVAL_SECONDS", "10"))
# Readings a job's sampler posts at a time (its first at once, its last when the job ends): fewer posts, the
# same samples; the dashboards see a reading up to this many intervals late.
GRIDLANE_SAMPLE_BATCH = max(1, min(60, int(os.environ.get("GRIDLANE_SAMPLE_BATCH", "10"))))
# How often the worker rolls usage up for the dashboards and acts on idle GPUs (both read whole windows).
GRIDLANE_ROLLUP_SECONDS = float(os.environ.get("GRIDLANE_ROLLUP_SECONDS", "60"))
# The seed's idle rule (portal.usage.rollup): a GPU is idle when its average utilisation over a window of this
# many minutes is below 80 %. Windows start at midnight UTC, so the length divides a day (5, 10, 15, 30, 60 ...).
GRIDLANE_IDLE_WINDOW_MINUTES = int(os.environ.get("GRIDLANE_IDLE_WINDOW_MINUTES", "30"))
if not 0 < GRIDLANE_IDLE_WINDOW_MINUTES <= 1440 or 1440 % GRIDLANE_IDLE_WINDOW_MINUTES:
    raise ImproperlyConfigured("GRIDLANE_IDLE_WINDOW_MINUTES must divide a day (1440 minutes): 5, 10, 15, 30, 60 ...")
# /readyz: the worker is unready when its last periodic cycle is older than this many cycles (30 s at least).
GRIDLANE_WORKER_STALE_CYCLES = int(os.environ.get("GRIDLANE_WORKER_STALE_CYCLES", "10"))
# Retention: raw usage samples, finished workloads' events and audit entries older than these many days are
# deleted by the worker (0 keeps them for ever); hourly rollups are kept. At most MAX_BATCHES batches of
# BATCH rows per kind each time, once per GRIDLANE_RETENTION_SECONDS.
GRIDLANE_RETENTION_DAYS = {
    "usage": int(os.environ.get("GRIDLANE_RETENTION_USAGE_DAYS", "90")),
    "events": int(os.environ.get("GRIDLANE_RETENTION_EVENT_DAYS", "0")),
    "audit": int(os.environ.get("GRIDLANE_RETENTION_AUDIT_DAYS", "0")),
}
# Kueue-owned Kubernetes fabrics: their Kueue queues are reconciled this often, and at the next cycle after a
# quota, department or fabric change.
GRIDLANE_KUEUE_SYNC_SECONDS = float(os.environ.get("GRIDLANE_KUEUE_SYNC_SECONDS", "300"))
GRIDLANE_RETENTION_SECONDS = float(os.environ.get("GRIDLANE_RETENTION_SECONDS", "3600"))
GRIDLANE_RETENTION_BATCH = int(os.environ.get("GRIDLANE_RETENTION_BATCH", "2000"))
GRIDLANE_RETENTION_MAX_BATCHES = int(os.environ.get("GRIDLANE_RETENTION_MAX_BATCHES", "50"))
# Ask the worker for a cycle right after submit and cancel (tests switch it off to drive cycles by hand).
GRIDLANE_KICK_WORKER = env_flag("GRIDLANE_KICK_WORKER", default=True)
# PostgreSQL prepares the statements the hot paths send again and again (portal.sql.prepared). Off only behind
# a pooler that does not keep a connection's prepared statements (PgBouncer in transaction mode before 1.21).
GRIDLANE_DB_PREPARE = env_flag("GRIDLANE_DB_PREPARE", default=True)

# Scripts stay as they are (pages use inline ones); framing, plugins and foreign <base> are refused.
GRIDLANE_CONTENT_SECURITY_POLICY = "frame-ancestors 'none'; object-src 'none'; base-uri 'self'"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"  # the provider's redirect back is a top-level GET, which Lax lets through
if not DEBUG and not DEMO:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
    SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
    SECURE_HSTS_SECONDS = int(os.environ.get("GRIDLANE_HSTS_SECONDS", str(365 * 24 * 3600)))
    # Both reach beyond Gridlane (every subdomain; browsers' preload lists), so IT opts in; check --deploy's
    # reminders of them are silenced below for that reason.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag("GRIDLANE_HSTS_INCLUDE_SUBDOMAINS")
    SECURE_HSTS_PRELOAD = env_flag("GRIDLANE_HSTS_PRELOAD")
    SILENCED_SYSTEM_CHECKS = ["security.W005", "security.W021"]
    SECURE_SSL_REDIRECT = env_flag("GRIDLANE_SSL_REDIRECT", default=True)
    # Probes and Prometheus ask over plain HTTP, straight at a web process.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    # Claims are read at sign-in, so a session's age bounds how long a removed membership lingers.
    SESSION_COOKIE_AGE = int(os.environ.get("GRIDLANE_SESSION_HOURS", "12")) * 3600
if env_flag("GRIDLANE_BEHIND_TLS_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The front proxies whose X-Forwarded-* headers are believed (addresses or networks, comma-separated); from
# anyone else those headers are dropped before Django reads them (portal.serving.ForwardedMiddleware).
# Who reads /metrics and /readyz's checks (portal.ops_access): clients on these networks, or with the scrape
# token (Authorization: Bearer <token>); anyone else gets /readyz's status code alone and /metrics refused.
GRIDLANE_OPS_NETWORKS = [
    n.strip() for n in os.environ.get("GRIDLANE_OPS_NETWORKS", "127.0.0.0/8,::1/128").split(",") if n.strip()
]
GRIDLANE_OPS_TOKEN = os.environ.get("GRIDLANE_OPS_TOKEN", "")
GRIDLANE_TRUSTED_PROXIES = [p.strip() for p in os.environ.get("GRIDLANE_TRUSTED_PROXIES", "127.0.0.1").split(",") if p]

# Every line names its request (X-Request-ID, `-` outside one); every 5xx is logged by django.request.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "portal.serving.RequestIdFilter"},
        "routine_tasks": {"()": "portal.worker.logs.RoutineToDebug"},
    },
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["request_id"]}},
    "loggers": {
        "gridlane": {"handlers": ["console"], "level": os.environ.get("GRIDLANE_LOG_LEVEL", "INFO")},
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        # django-q2's lines for every task it runs are DEBUG (see portal/worker/logs.py).
        "django-q": {
            "handlers": ["console"],
            "level": os.environ.get("GRIDLANE_LOG_LEVEL", "INFO"),
            "filters": ["routine_tasks"],
            "propagate": False,
        },
    },
}

# Notifications (portal/notify): e-mail through Django's mail settings, webhooks with Slack/Teams-style JSON.
EMAIL_BACKEND = os.environ.get("GRIDLANE_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("GRIDLANE_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("GRIDLANE_EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("GRIDLANE_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("GRIDLANE_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = os.environ.get("GRIDLANE_EMAIL_TLS", "") == "1"
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("GRIDLANE_EMAIL_FROM", "gridlane@localhost")
GRIDLANE_NOTIFY_SENDERS = int(os.environ.get("GRIDLANE_NOTIFY_SENDERS", "4"))  # sender threads per worker
GRIDLANE_NOTIFY_TIMEOUT_S = float(os.environ.get("GRIDLANE_NOTIFY_TIMEOUT_S", "10"))
GRIDLANE_NOTIFY_RETRY_S = float(os.environ.get("GRIDLANE_NOTIFY_RETRY_S", "30"))  # doubled after each failed try
# Hosts webhooks may go to (a name allows its subdomains), e.g. "hooks.slack.com,example.webhook.office.com";
# empty: any public host. Entries that are networks ("10.20.0.0/16") let webhooks reach those addresses too:
# without one, a webhook never reaches a loopback, link-local, private or reserved address (portal.outbound).
# Sites should set it: a webhook is a request the portal makes on a person's behalf.
GRIDLANE_NOTIFY_WEBHOOK_HOSTS = [
    h.strip().lower() for h in os.environ.get("GRIDLANE_NOTIFY_WEBHOOK_HOSTS", "").split(",") if h.strip()
]
# plotly.js for the dashboards: "basic" (scatter and bar, where `make` installed it) or "full" (the plotly package's).
GRIDLANE_PLOTLY_BUNDLE = os.environ.get("GRIDLANE_PLOTLY_BUNDLE", "basic")
# The monthly cost of one owned GPU (purchase spread over its life, power, space), for the capacity page's
# "buy or burst"; empty: the page shows the numbers without a verdict.
_gpu_month = os.environ.get("GRIDLANE_GPU_MONTH_PRICE", "")
GRIDLANE_GPU_MONTH_PRICE = Decimal(_gpu_month) if _gpu_month else None
