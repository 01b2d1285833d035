"""Settings from the environment, with safe defaults for the embedded mode (SQLite under var/)."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
import django_stubs_ext
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
    """The configured key, else one kept in var/ so sessions survive restarts of a laptop install."""
    if key := os.environ.get("GRIDLANE_SECRET_KEY"):
        return key
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
    "portal.accounts",
    "portal.queues",
    "portal.workloads",
    "portal.worker",
    "portal.api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
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
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'gridlane.sqlite3'}"),
        conn_max_age=60,
    )
}
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
# Local accounts are the demo's sign-in; OIDC plugs in here as another backend.
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "workloads:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True  # serve straight from the apps in development and tests, no collectstatic

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
    "poll": 0.2,
    "catch_up": False,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": 200,
    "label": "Worker tasks",
}

# How often the worker runs a scheduling cycle even when nothing asked for one.
GRIDLANE_CYCLE_SECONDS = float(os.environ.get("GRIDLANE_CYCLE_SECONDS", "2"))
# Where the local fabric keeps its job folders unless a fabric's settings say otherwise.
GRIDLANE_LOCAL_FABRIC_ROOT = Path(os.environ.get("GRIDLANE_LOCAL_FABRIC_ROOT", VAR_DIR / "local-fabric"))
# Ask the worker for a cycle right after submit and cancel (tests switch it off to drive cycles by hand).
GRIDLANE_KICK_WORKER = env_flag("GRIDLANE_KICK_WORKER", default=True)

if not DEBUG and not DEMO:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "gridlane": {"handlers": ["console"], "level": os.environ.get("GRIDLANE_LOG_LEVEL", "INFO")},
    },
}
