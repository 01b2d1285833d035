from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from portal.accounts.views import login_view


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("", include("portal.workloads.urls")),
    path("accounts/login/", login_view, name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("healthz", healthz),
]

admin.site.site_header = "Gridlane administration"
admin.site.site_title = "Gridlane"
