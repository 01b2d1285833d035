from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from portal.accounts.api import MeView, TokenViewSet
from portal.api import budgets, callbacks, code, efficiency, usage
from portal.api.views import QueueViewSet, WorkloadViewSet

router = DefaultRouter(trailing_slash=True)
router.register("queues", QueueViewSet, basename="queue")
router.register("workloads", WorkloadViewSet, basename="workload")
router.register("tokens", TokenViewSet, basename="token")

app_name = "api"
urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("me/", MeView.as_view(), name="me"),
    path("agent/", include("portal.agents.urls")),
    path("workloads/<uuid:pk>/endpoint/", callbacks.endpoint, name="workload-endpoint"),  # from a notebook's job
    path("workloads/<uuid:pk>/samples/", callbacks.samples, name="workload-samples"),  # from a job's sampler
    path("workloads/<uuid:pk>/code/", code.workload_code, name="workload-code"),  # from a job, before its command
    path("workloads/<uuid:pk>/efficiency/", efficiency.workload_efficiency, name="workload-efficiency"),
    path("code/<str:digest>/", code.bundle, name="code-bundle"),
    path("groups/<slug:slug>/usage/", usage.group_usage, name="group-usage"),
    path("groups/<slug:slug>/budgets/", budgets.set_budget, name="group-budgets"),
    path("", include(router.urls)),
]
