"""A stand-in for the provider's back-channel (token, userinfo, JWKS) that answers with what a test crafts.

The browser tests use the real provider (tests/idp); this one lets a test hand Gridlane an ID token
signed by another key, expired, for another audience, with a wrong nonce, and so on.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "gridlane-fake"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class FakeProvider:
    def __init__(self) -> None:
        self.key = new_key()
        self.kid = "fake-key-1"
        self.token_requests: list[dict[str, list[str]]] = []
        self.id_token = ""
        self.userinfo: dict[str, Any] = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/jwks":
                    jwk = json.loads(RSAAlgorithm.to_jwk(provider.key.public_key()))
                    self.answer({"keys": [{**jwk, "kid": provider.kid, "alg": "RS256", "use": "sig"}]})
                elif self.path == "/me" and self.headers.get("Authorization") == "Bearer fake-access-token":
                    self.answer(provider.userinfo)
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                provider.token_requests.append(form)
                if self.path != "/token":
                    self.send_error(404)
                    return
                self.answer(
                    {"access_token": "fake-access-token", "token_type": "Bearer", "id_token": provider.id_token}
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def settings(self) -> dict[str, Any]:
        """Django settings that point Gridlane's sign-in at this provider."""
        return {
            "GRIDLANE_OIDC": {
                "ISSUER": self.issuer,
                "DISCOVERY_URL": "",
                "END_SESSION_ENDPOINT": f"{self.issuer}/logout",
                "USERNAME_CLAIM": "preferred_username",
                "EMAIL_CLAIM": "email",
                "GROUPS_CLAIM": "groups",
                "PROVIDER_NAME": "the fake provider",
            },
            "OIDC_RP_CLIENT_ID": CLIENT_ID,
            "OIDC_RP_CLIENT_SECRET": "fake-secret",
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.issuer}/auth",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.issuer}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.issuer}/me",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.issuer}/jwks",
        }

    def claims(self, nonce: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": "sub-dora",
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def sign(self, claims: dict[str, Any], key: Any = None, algorithm: str = "RS256", kid: str | None = None) -> str:
        return jwt.encode(claims, key or self.key, algorithm=algorithm, headers={"kid": kid or self.kid})

    def person(self, login: str, groups: list[str], sub: str | None = None) -> None:
        """What the userinfo endpoint says next."""
        self.userinfo = {
            "sub": sub or f"sub-{login}",
            "preferred_username": login,
            "email": f"{login}@example.test",
            "groups": groups,
        }
