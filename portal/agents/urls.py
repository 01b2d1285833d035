from django.urls import path

from portal.agents import native, views
from portal.burst import views as burst

urlpatterns = [
    path("enroll/", burst.enroll, name="agent-enroll"),
    path("register/", views.register, name="agent-register"),
    path("heartbeat/", views.heartbeat, name="agent-heartbeat"),
    path("claim/", views.claim, name="agent-claim"),
    path("ends/", views.ends, name="agent-ends"),
    path("runs/<str:run_id>/status/", views.status, name="agent-status"),
    path("runs/<str:run_id>/log/", views.log, name="agent-log"),
    path("runs/<str:run_id>/usage/", views.usage, name="agent-usage"),
    path("pbs-jobs/usage/", native.usage, name="agent-pbs-jobs-usage"),
    path("leases/<str:workload_id>/key/", views.lease_key, name="agent-lease-key"),
]
