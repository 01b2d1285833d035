"""The burst pages for IT, and the one agent call that carries no token yet: enrollment."""

from __future__ import annotations

from rest_framework.decorators import api_view, authentication_classes, permission_classes, throttle_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from portal.burst import enrollment


@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
@throttle_classes([])
def enroll(request: Request) -> Response:
    """A burst instance's boot script trades its one-time token for its agent's own: 403 once spent or expired."""
    token, host = request.data.get("token"), request.data.get("host")
    if not isinstance(token, str) or not isinstance(host, str) or not token or not host:
        return Response({"errors": {"token": ["Give the enrollment token and this host's name."]}}, status=400)
    try:
        instance, api_token = enrollment.redeem(token, host)
    except enrollment.Refused as refused:
        return Response({"errors": {"token": [str(refused)]}}, status=403)
    return Response({"token": api_token, "fabric": instance.pool.fabric.name, "host": instance.host_name})
