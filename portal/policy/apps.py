from django.apps import AppConfig


class PolicyConfig(AppConfig):
    name = "portal.policy"
    label = "policy"
    verbose_name = "Policy"
