from django.urls import path, re_path

from portal.connect import views

app_name = "connect"
urlpatterns = [
    # Served by the connect proxy in front of Django (portal/asgi.py); Django sees these only when the portal
    # runs without it (a WSGI server), and then says so.
    path("<uuid:pk>/", views.without_proxy, name="root"),
    re_path(r"^(?P<pk>[0-9a-fA-F-]{36})/.*$", views.without_proxy),
]
