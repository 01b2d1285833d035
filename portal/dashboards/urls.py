from django.urls import path

from portal.dashboards import views

app_name = "dashboards"
urlpatterns = [
    path("", views.index, name="index"),
    path("<slug:slug>/", views.team, name="team"),
    path("<slug:slug>/usage.csv", views.team_usage_csv, name="team-usage-csv"),
    path("<slug:slug>/chargeback/", views.team_chargeback, name="team-chargeback"),
]
