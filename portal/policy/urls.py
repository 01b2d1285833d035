"""Pages: /departments/ (department dashboards) and /standing/<team>/ (fair-share standing)."""

from django.urls import path

from portal.policy import pages

app_name = "policy"
urlpatterns = [
    path("departments/", pages.department_index, name="departments"),
    path("departments/<slug:slug>/", pages.department, name="department"),
    path("standing/<slug:slug>/", pages.team_standing, name="standing"),
]
