from django.urls import path, re_path

from portal.docs import views

app_name = "docs"
urlpatterns = [
    path("", views.index, name="index"),
    re_path(r"^images/(?P<name>[a-z0-9][a-z0-9-]{0,63}\.png)$", views.image, name="image"),
    re_path(r"^(?P<name>[a-z0-9][a-z0-9-]{0,63})/$", views.page, name="page"),
]
