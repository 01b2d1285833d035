from django.urls import path

from portal.workloads import views

app_name = "workloads"
urlpatterns = [
    path("", views.workload_list, name="list"),
    path("workloads/new/", views.workload_new, name="new"),
    path("workloads/<uuid:pk>/", views.workload_detail, name="detail"),
    path("workloads/<uuid:pk>/cancel/", views.workload_cancel, name="cancel"),
]
