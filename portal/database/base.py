"""Django's PostgreSQL backend, checking a kept connection's health without a statement.

CONN_HEALTH_CHECKS asks, before each request's first query, whether the connection kept from the last request
still works, so that one which died meanwhile (a database restart) is replaced instead of failing the request.
Django's check sends `SELECT 1`: a round trip on every request, one in six of a submit's, and on two cores
about 15 % of a submit's CPU in three paired runs of bench.cpu_split. This one asks the connection's socket
instead, without waiting: between requests nothing is owed to an idle connection, so a socket with nothing to
read has not been hung up. When the server ends a session (a restart, pg_terminate_backend, an idle timeout)
it says so on the socket (an error message, then the close), which makes it readable; only then is `SELECT 1`
sent, and it fails. Any other message that arrives meanwhile (a notice, a changed parameter) costs the same
`SELECT 1`, which succeeds.
A connection left inside a transaction is asked as Django asks it (an aborted one is then replaced).

What no check short of a round trip sees, a peer gone silently (its host lost), `SELECT 1` does not see either
until TCP gives up; the request then fails as before.
"""

from __future__ import annotations

import select

import psycopg
from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        if self.connection is None or self.connection.closed:
            return False
        if self.connection.info.transaction_status != TransactionStatus.IDLE:
            return bool(super().is_usable())  # left in a transaction (an aborted one fails here): ask, as Django
        try:
            fd = self.connection.pgconn.socket
        except psycopg.Error:  # libpq has no socket for it any more
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        if not poller.poll(0):
            return True  # nothing arrived while it was idle: the server has not hung up
        return bool(super().is_usable())  # something did: ask the server (a hung-up connection fails here)
