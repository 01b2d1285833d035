from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "portal.agents"
    label = "agents"
