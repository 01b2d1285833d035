from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "portal.dashboards"
    label = "dashboards"
