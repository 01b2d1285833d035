from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from portal.api.views import QueueViewSet, WorkloadViewSet

router = DefaultRouter(trailing_slash=True)
router.register("queues", QueueViewSet, basename="queue")
router.register("workloads", WorkloadViewSet, basename="workload")

app_name = "api"
urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("", include(router.urls)),
]
