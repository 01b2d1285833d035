from django.urls import path

from portal.dashboards import views

app_name = "dashboards"
urlpatterns = [
    path("", views.index, name="index"),
    path("<slug:slug>/", views.team, name="team"),
    path("<slug:slug>/usage.csv", views.team_usage_csv, name="team-usage-csv"),
    path("<slug:slug>/chargeback/", views.team_chargeback, name="team-chargeback"),
    path("<slug:slug>/budgets/set/", views.budget_set, name="budget-set"),
    path("<slug:slug>/grants/new/", views.grant_new, name="grant-new"),
    path("<slug:slug>/grants/<int:pk>/withdraw/", views.grant_withdraw, name="grant-withdraw"),
]
