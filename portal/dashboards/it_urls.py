from django.urls import path

from portal.burst import views as burst
from portal.dashboards import objectives, views
from portal.whatif import views as whatif

app_name = "it"
urlpatterns = [
    path("queues/", views.it_queues, name="queues"),
    path("fabrics/", views.it_fabrics, name="fabrics"),
    path("capacity/", views.it_capacity, name="capacity"),
    path("burst/", burst.it_burst, name="burst"),
    path("grants/", views.it_grants, name="grants"),
    path("grants/<int:pk>/decide/", views.it_grant_decide, name="grant-decide"),
    path("what-if/", whatif.page, name="whatif"),
    path("what-if/<int:pk>/", whatif.run, name="whatif-run"),
    path("objectives/", objectives.objectives, name="objectives"),
    path("objectives/<slug:slug>/", objectives.objective, name="objective"),
]
