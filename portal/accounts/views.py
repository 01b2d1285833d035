from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import render


def login_view(request: HttpRequest, extra_context: dict[str, object] | None = None) -> HttpResponseBase:
    """Local accounts in demo mode; otherwise sign-in belongs to the identity provider."""
    if settings.DEMO:
        return auth_views.LoginView.as_view(extra_context={"demo": True})(request)
    return render(request, "registration/no_local_login.html", status=403)
