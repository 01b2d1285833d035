from django.contrib import admin
from django.urls import include, path

from portal import health, serving
from portal.accounts.urls import oidc_urlpatterns
from portal.accounts.views import admin_login_view, login_view, logout_view
from portal.dashboards import efficiency
from portal.metrics import metrics

urlpatterns = [
    # First: the API takes agents' bursts, and Django tries patterns in order (each miss costs a few microseconds).
    path("api/v1/", include("portal.api.urls")),
    path("api/v1/", include("portal.policy.api_urls")),  # IT's policy API, departments, fair-share standing
    path("", include("portal.workloads.urls")),
    path("workloads/<uuid:pk>/efficiency/", efficiency.page, name="workload-efficiency"),
    path("accounts/login/", login_view, name="login"),
    path("accounts/logout/", logout_view, name="logout"),
    path("accounts/", include("portal.accounts.urls")),
    path("oidc/", include(oidc_urlpatterns)),
    path("admin/login/", admin_login_view),  # the admin signs in like everyone else (no local passwords outside demo)
    path("admin/logout/", logout_view),
    path("admin/", admin.site.urls),
    path("teams/", include("portal.dashboards.urls")),
    path("it/", include("portal.dashboards.it_urls")),
    path("", include("portal.policy.urls")),  # /departments/, /standing/<team>/
    path("connect/", include("portal.connect.urls")),
    path("docs/", include("portal.docs.urls")),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", metrics),
]

handler400 = serving.bad_request
handler404 = serving.not_found
handler500 = serving.server_error

admin.site.site_header = "Gridlane administration"
admin.site.site_title = "Gridlane"
