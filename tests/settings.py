"""Test settings: the real settings, in demo mode, with cycles driven by the tests themselves."""

import os

os.environ.setdefault("GRIDLANE_DEMO", "1")
os.environ.setdefault("GRIDLANE_SECRET_KEY", "tests-only-secret-key-not-for-production")
os.environ["GRIDLANE_KICK_WORKER"] = "0"
# The test identity provider (tests/idp, started by tests/services/idp/up.sh); only sign-in tests call it.
os.environ.setdefault("GRIDLANE_OIDC_ISSUER", f"http://127.0.0.1:{os.environ.get('GRIDLANE_TEST_IDP_PORT', '9000')}")
os.environ.setdefault("GRIDLANE_OIDC_CLIENT_ID", "gridlane-tests")
os.environ.setdefault("GRIDLANE_OIDC_CLIENT_SECRET", "gridlane-tests-secret")

from portal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests only
