from django.urls import path

from portal.dashboards import views

app_name = "dashboards"
urlpatterns = [
    path("", views.index, name="index"),
    path("<slug:slug>/", views.team, name="team"),
]
