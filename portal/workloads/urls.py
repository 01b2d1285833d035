from django.urls import path

from portal.workloads import listing, views

app_name = "workloads"
urlpatterns = [
    path("", views.workload_list, name="list"),
    path("workloads/new/", views.workload_new, name="new"),
    path("workloads/cancel/", listing.cancel_many, name="cancel_many"),
    path("workloads/new/script/", views.script_new, name="new_script"),
    path("notebooks/new/", views.notebook_new, name="new_notebook"),
    path("leases/new/", views.vm_new, name="new_vm"),
    path("workloads/<uuid:pk>/", views.workload_detail, name="detail"),
    path("workloads/<uuid:pk>/cancel/", views.workload_cancel, name="cancel"),
    path("workloads/<uuid:pk>/extend/", views.workload_extend, name="extend"),
    path("workloads/<uuid:pk>/relaunch/", views.workload_relaunch, name="relaunch"),
    path("workloads/<uuid:pk>/share/", views.workload_share, name="share"),
    path("workloads/<uuid:pk>/log/", views.workload_log, name="log"),
    path("workloads/<uuid:pk>/log.txt", views.workload_log_download, name="log_download"),
]
