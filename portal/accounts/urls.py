from django.urls import path

from portal.accounts import oidc, views
from portal.notify import views as notify_views

app_name = "accounts"
urlpatterns = [
    path("", views.account, name="home"),
    path("signed-out/", views.signed_out, name="signed_out"),
    path("tokens/", views.token_create, name="token_create"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
    path("notifications/", notify_views.preferences, name="notifications"),
    path("notifications/test/", notify_views.send_test, name="notifications_test"),
    path("agents/", views.agent_list, name="agents"),
    path("agents/new/", views.agent_new, name="agent_new"),
    path("agents/<int:pk>/", views.agent_detail, name="agent"),
    path("agents/<int:pk>/tokens/", views.agent_token_create, name="agent_token_create"),
    path("agents/<int:pk>/tokens/<int:token_pk>/revoke/", views.agent_token_revoke, name="agent_token_revoke"),
    path("agents/<int:pk>/disable/", views.agent_disable, name="agent_disable"),
]

# Under /oidc/, with the names mozilla-django-oidc reverses (no namespace).
oidc_urlpatterns = [
    path("authenticate/", oidc.AuthenticateView.as_view(), name="oidc_authentication_init"),
    path("callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback"),
]
