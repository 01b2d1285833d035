"""The portal as an ASGI app: /connect/ goes to the connect proxy (HTTP and WebSocket), everything else to
Django. Served by uvicorn: `gunicorn -c deploy/gunicorn.conf.py portal.asgi:application` in production (its
worker class is uvicorn's), and by `make run`."""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_app = get_asgi_application()

from portal.connect.proxy import ConnectApp, Receive, Scope, Send  # noqa: E402 (needs Django set up)

connect = ConnectApp()


async def application(scope: Scope, receive: Receive, send: Send) -> Any:
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    path: str = scope.get("path", "")
    if path.startswith("/connect/"):
        return await connect(scope, receive, send)
    if scope["type"] == "websocket":
        await receive()
        return await send({"type": "websocket.close", "code": 1008})  # no WebSocket outside /connect/
    return await django_app(scope, receive, send)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await connect.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
