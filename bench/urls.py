"""The portal's URLs, and the baseline views the submit is measured against (only under bench.settings)."""

from django.urls import include, path

from bench.echo import Echo, Floor

urlpatterns = [
    path("bench/echo/", Echo.as_view()),
    path("bench/floor/", Floor.as_view()),
    path("", include("portal.urls")),
]
