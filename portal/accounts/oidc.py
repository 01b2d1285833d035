"""Sign-in through an OpenID Connect provider: mozilla-django-oidc, tightened.

Authorization code flow with PKCE (S256), state and nonce kept per attempt in the session, ID tokens
verified as RS256 against the provider's JWKS with issuer, audience, expiry and nonce all required.
mozilla-django-oidc does not read discovery: endpoints come from settings where given, else from the
provider's discovery document, fetched once per process at the first sign-in (never at start-up, so
commands and pages work while the provider is down). Who someone is: the (issuer, subject) pair; the
username claim names a new account or adopts an existing person of that name once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import PermissionDenied, SuspiciousOperation, ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.accounts import audit, claims, posix
from portal.accounts.models import SERVICE_USERNAME_PREFIX, ExternalIdentity, ServiceIdentity

log = logging.getLogger("gridlane.oidc")
CLOCK_SKEW_S = 30
username_validator = UnicodeUsernameValidator()


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read, or does not describe the configured issuer."""


class SignInRefused(PermissionDenied):
    """Django's authenticate() turns this into user_login_failed (audited) and no user."""


@dataclass(frozen=True)
class Endpoints:
    issuer: str
    authorization: str
    token: str
    userinfo: str
    jwks: str
    end_session: str  # "" when the provider has no RP-initiated logout


_discovered: dict[str, dict[str, Any]] = {}
_discovery_lock = threading.Lock()


def enabled() -> bool:
    return bool(
        settings.OIDC_RP_CLIENT_ID and (settings.GRIDLANE_OIDC["ISSUER"] or settings.GRIDLANE_OIDC["DISCOVERY_URL"])
    )


def _discover(url: str) -> dict[str, Any]:
    with _discovery_lock:
        if url not in _discovered:
            try:
                response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
                response.raise_for_status()
                document = response.json()
            except (requests.RequestException, ValueError) as error:
                raise ProviderUnavailable(f"cannot read {url}: {error}") from error
            if not isinstance(document, dict):
                raise ProviderUnavailable(f"{url} is not a discovery document")
            _discovered[url] = document
        return _discovered[url]


def endpoints() -> Endpoints:
    """The provider's endpoints: each from settings when set there, else from discovery."""
    conf = settings.GRIDLANE_OIDC
    given = {
        "issuer": conf["ISSUER"],
        "authorization_endpoint": settings.OIDC_OP_AUTHORIZATION_ENDPOINT,
        "token_endpoint": settings.OIDC_OP_TOKEN_ENDPOINT,
        "userinfo_endpoint": settings.OIDC_OP_USER_ENDPOINT,
        "jwks_uri": settings.OIDC_OP_JWKS_ENDPOINT,
        "end_session_endpoint": conf["END_SESSION_ENDPOINT"],
    }
    document: dict[str, Any] = {}
    required_missing = any(not value for key, value in given.items() if key != "end_session_endpoint")
    if conf["DISCOVERY_URL"] and (required_missing or not given["end_session_endpoint"]):
        try:
            document = _discover(conf["DISCOVERY_URL"])
        except ProviderUnavailable:
            if required_missing:
                raise  # without discovery only the optional end-session endpoint may stay unknown
        if given["issuer"] and document and document.get("issuer") != given["issuer"]:
            raise ProviderUnavailable(f"discovery names issuer {document.get('issuer')!r}, not {given['issuer']!r}")
    merged = {key: value or str(document.get(key) or "") for key, value in given.items()}
    missing = [key for key, value in merged.items() if not value and key != "end_session_endpoint"]
    if missing:
        raise ProviderUnavailable(f"no {', '.join(missing)} configured or discovered")
    return Endpoints(
        issuer=merged["issuer"],
        authorization=merged["authorization_endpoint"],
        token=merged["token_endpoint"],
        userinfo=merged["userinfo_endpoint"],
        jwks=merged["jwks_uri"],
        end_session=merged["end_session_endpoint"],
    )


def end_session_url(request: HttpRequest, id_token: str) -> str | None:
    """Where to send the browser so the provider ends its session too; None when it cannot."""
    try:
        end_session = endpoints().end_session
    except ProviderUnavailable:
        return None
    if not end_session:
        return None
    query = urlencode(
        {
            "id_token_hint": id_token,
            "client_id": settings.OIDC_RP_CLIENT_ID,
            "post_logout_redirect_uri": request.build_absolute_uri(reverse("accounts:signed_out")),
        }
    )
    return f"{end_session}?{query}"


def _refuse(request: HttpRequest | None, reason: str) -> SignInRefused:
    if request is not None:
        request.gridlane_signin_failure = reason  # type: ignore[attr-defined]
    log.warning("sign-in refused: %s", reason)
    return SignInRefused(reason)


def groups_from(value: Any) -> list[str]:
    """The groups claim as a list of strings: providers send a list, some a single string."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def sign_in(request: HttpRequest, issuer: str, all_claims: dict[str, Any]) -> Any:
    """The Gridlane user for these verified claims, with teams and IT staff brought in line with them.

    Raises SignInRefused when the claims cannot name a person here.
    """
    conf = settings.GRIDLANE_OIDC
    subject = all_claims.get("sub")
    username = all_claims.get(conf["USERNAME_CLAIM"])
    if not isinstance(subject, str) or not subject:
        raise _refuse(request, "the claims carry no subject")
    if not isinstance(username, str) or not username or len(username) > 150:
        raise _refuse(request, f"the {conf['USERNAME_CLAIM']!r} claim is missing or too long")
    request.gridlane_signin_username = username  # type: ignore[attr-defined]
    try:
        username_validator(username)
    except ValidationError as error:
        raise _refuse(request, f"the {conf['USERNAME_CLAIM']!r} claim is not a usable username") from error
    if username.startswith(SERVICE_USERNAME_PREFIX):
        raise _refuse(request, f"usernames starting {SERVICE_USERNAME_PREFIX!r} belong to agents")
    email = all_claims.get(conf["EMAIL_CLAIM"])
    email = email if isinstance(email, str) else ""
    groups = groups_from(all_claims.get(conf["GROUPS_CLAIM"]))

    users = get_user_model().objects
    with transaction.atomic():
        link = (
            ExternalIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if link is None:
            user = users.filter(username=username).first()
            if user is None:
                user = users.create_user(username, email=email)  # no usable password: sign-in is the provider's
            elif ServiceIdentity.objects.filter(user=user).exists():
                raise _refuse(request, f"{username!r} is an agent, not a person")
            elif ExternalIdentity.objects.filter(user=user).exists():
                raise _refuse(request, f"{username!r} already belongs to another identity at a provider")
            link = ExternalIdentity(user=user, issuer=issuer, subject=subject)
        user = link.user
        if not user.is_active:
            raise _refuse(request, f"the account {user.username!r} is disabled")
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        link.groups = groups
        link.claims = posix.claims_to_store(all_claims)
        link.synced_at = timezone.now()
        link.save()
        with audit.acting_as(user, "sign-in claims"):
            claims.apply_groups(user, groups)
    return user


class Backend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """mozilla-django-oidc's backend with endpoints resolved lazily and every ID token claim checked."""

    OIDC_RP_SIGN_ALGO = "RS256"
    OIDC_RP_IDP_SIGN_KEY = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The parent reads every endpoint here; Django builds a backend for each request's session
        # lookup, which must never wait on the provider. The attributes below resolve when used.
        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return endpoints().token

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return endpoints().userinfo

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return endpoints().jwks

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return str(settings.OIDC_RP_CLIENT_ID)

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:
        return str(settings.OIDC_RP_CLIENT_SECRET)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        """A user for an OIDC callback; None for anything else (a password form, say)."""
        if request is None or "nonce" not in kwargs or not enabled():
            return None
        try:
            return super().authenticate(request, **kwargs)
        except SignInRefused:
            raise
        except (
            SuspiciousOperation,
            ProviderUnavailable,
            requests.RequestException,
            jwt.PyJWTError,
            KeyError,
            TypeError,
            ValueError,
        ) as error:
            raise _refuse(request, f"{type(error).__name__}: {error}") from error

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims once signature (RS256, JWKS), issuer, audience, expiry and nonce all hold."""
        header = jwt.get_unverified_header(token)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"ID token signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}")
        key = self.retrieve_matching_jwk(token)
        payload: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[self.OIDC_RP_SIGN_ALGO],
            audience=self.OIDC_RP_CLIENT_ID,
            issuer=endpoints().issuer,
            leeway=CLOCK_SKEW_S,
            options={"require": ["iss", "aud", "sub", "exp", "iat"]},
        )
        audiences = payload["aud"] if isinstance(payload["aud"], list) else [payload["aud"]]
        if len(audiences) > 1 and payload.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("ID token for several audiences without this client as azp")
        nonce = kwargs.get("nonce")
        if not nonce or payload.get("nonce") != nonce:
            raise SuspiciousOperation("ID token nonce does not match this sign-in")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims with the userinfo endpoint's on top, refused unless both name one subject."""
        response = requests.get(
            self.OIDC_OP_USER_ENDPOINT,
            headers={"Authorization": f"Bearer {access_token}"},
            timeout=settings.OIDC_TIMEOUT,
        )
        response.raise_for_status()
        userinfo = response.json()
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            raise _refuse(self.request, "userinfo answers for another subject than the ID token")
        return {**payload, **userinfo}

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        all_claims = self.get_userinfo(access_token, id_token, payload)
        return sign_in(self.request, endpoints().issuer, all_claims)

    def get_user(self, user_id: Any) -> Any:
        return _session_user(self, user_id)


class LocalBackend(ModelBackend):
    """Demo mode's local accounts; agents have no password and never sign in here."""

    def user_can_authenticate(self, user: Any) -> bool:
        if ServiceIdentity.objects.filter(user_id=user.pk).exists():
            return False
        return super().user_can_authenticate(user)

    def get_user(self, user_id: Any) -> Any:
        return _session_user(self, user_id)


def _session_user(backend: ModelBackend, user_id: Any) -> Any:
    """The session's user with its service identity (or its absence) loaded in the same query.

    None for an inactive user or an agent: agents use tokens, never sessions.
    """
    user = get_user_model()._default_manager.select_related("service_identity").filter(pk=user_id).first()
    if user is None or not user.is_active:
        return None
    if getattr(user, "service_identity", None) is not None:
        return None
    return user


class AuthenticateView(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Start a sign-in: state, nonce and PKCE verifier into the session, the browser to the provider."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the parent would read the endpoint from settings here

    def get(self, request: HttpRequest) -> HttpResponseBase:
        if not enabled():
            raise Http404("Sign-in through an identity provider is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoints().authorization
        except ProviderUnavailable as error:
            log.error("identity provider unavailable: %s", error)
            return render(request, "registration/provider_unavailable.html", status=503)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        response: HttpResponseBase = super().get(request)
        return response


class CallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """The provider sends the browser back here with a code and the state it was given.

    The state must be one this browser's session started and not yet used: a forged, replayed or
    cross-browser callback is refused before any call to the provider. The state is spent before the
    code is exchanged, so a second use of the same callback fails however the first one went.
    """

    def get(self, request: HttpRequest) -> HttpResponseBase:
        state = request.GET.get("state", "")
        states = request.session.get("oidc_states")
        states = states if isinstance(states, dict) else {}
        if request.GET.get("error"):
            if states.pop(state, None) is not None:
                request.session["oidc_states"] = states
            return self.refused(f"the identity provider answered {request.GET['error'][:100]!r}")
        if not state or "code" not in request.GET:
            return self.refused("the callback carries no code or no state")
        attempt = states.pop(state, None)
        if not isinstance(attempt, dict):
            return self.refused("unknown or already used state: a forged or replayed callback")
        request.session["oidc_states"] = states
        request.session.save()
        # Reload, so that tokens stored during authentication do not overwrite another tab's changes.
        request.session = request.session.__class__(request.session.session_key)
        self.user = auth.authenticate(request, nonce=attempt.get("nonce"), code_verifier=attempt.get("code_verifier"))
        if self.user is not None and self.user.is_active:
            response: HttpResponseBase = self.login_success()
            return response
        return self.login_failure()  # the backend's refusal is already in the audit log

    def refused(self, reason: str) -> HttpResponse:
        audit.record("signin.failed", "", actor=None, method="oidc", reason=reason, ip=audit.client_ip(self.request))
        log.warning("sign-in callback refused: %s", reason)
        return self.login_failure()

    def login_failure(self) -> HttpResponse:
        return render(self.request, "registration/signin_failed.html", status=403)
