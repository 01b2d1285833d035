from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "portal.budgets"
    label = "budgets"
    verbose_name = "Budgets"
    default_auto_field = "django.db.models.BigAutoField"
