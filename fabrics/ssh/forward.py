"""Local ports carried through a login node: what `ssh -L 127.0.0.1:<free port>:node:port` does, over the
fabric's own paramiko connection, for compute nodes the portal cannot route to.

A `Forward` listens on a free loopback port; each connection to it gets a direct-tcpip channel to the node's
port through the login node, and one thread copies bytes both ways until either side closes. The portal's
connect proxy and the worker's idle check reach a job's server this way when its fabric says
`"connect_via": "ssh"`. Loopback only: nothing off this host can use it, and the server still wants its token.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable

import paramiko

from fabrics.base import FabricError

log = logging.getLogger("gridlane.fabrics")

CHUNK = 256 * 1024


class Forward:
    def __init__(self, open_channel: Callable[[], paramiko.Channel]) -> None:
        self._open_channel = open_channel
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name=f"forward-{self.port}", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        with conn:
            try:
                channel = self._open_channel()
            except FabricError as error:
                log.info("forward %s: %s", self.port, error)
                return
            with channel:
                _copy(conn, channel)


def _copy(conn: socket.socket, channel: paramiko.Channel) -> None:
    """Bytes both ways until either side ends (paramiko channels have a file descriptor select can wait on)."""
    while True:
        ready, _, _ = select.select([conn, channel], [], [], 60.0)
        if conn in ready:
            data = conn.recv(CHUNK)
            if not data:
                return
            channel.sendall(data)
        if channel in ready:
            data = channel.recv(CHUNK)
            if not data:
                return
            conn.sendall(data)
