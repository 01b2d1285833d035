"""The policy API under /api/v1/: IT's admin API and policy documents; departments and fair-share standing."""

from django.urls import path

from portal.policy import api, documents_api, reading_api

urlpatterns = [
    path("policy/", documents_api.export, name="policy-export"),
    path("policy/plan/", documents_api.plan, name="policy-plan"),
    path("policy/apply/", documents_api.apply_document, name="policy-apply"),
    path("departments/<slug:slug>/usage/", reading_api.department_usage, name="department-usage"),
    path("groups/<slug:slug>/standing/", reading_api.group_standing, name="group-standing"),
    path("admin/<str:kind>/", api.KindList.as_view(), name="policy-kind"),
    path("admin/<str:kind>/<str:key>/", api.KindItem.as_view(), name="policy-object"),
]
