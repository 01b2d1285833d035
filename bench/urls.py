"""The portal's URLs, and the echo view the submit is measured against (only under bench.settings)."""

from django.urls import include, path

from bench.echo import Echo

urlpatterns = [
    path("bench/echo/", Echo.as_view()),
    path("", include("portal.urls")),
]
