"""Test settings: the real settings, in demo mode, with cycles driven by the tests themselves."""

import os

os.environ.setdefault("GRIDLANE_DEMO", "1")
os.environ.setdefault("GRIDLANE_SECRET_KEY", "tests-only-secret-key-not-for-production")
os.environ["GRIDLANE_KICK_WORKER"] = "0"

from portal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests only
