"""One persistent SSH connection to a login node: the Slurm and PBS fabrics' only seam to the outside.

Host keys come only from the fabric's stored known_hosts lines (RejectPolicy: an unknown or changed
key is refused, never added); authentication is by key only. Commands are argv lists joined with
`shlex`, run by the account's login shell; scripts travel on stdin, never on the command line.
A dropped connection is reopened on the next call. A command is sent again after a drop only when
the caller says it is safe (`retry=True`, for reads) or when it never left: a submission that may
have reached the cluster is reported as a retryable error, and the dispatcher finds it by its tag.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import paramiko

from fabrics.base import FabricError
from fabrics.ssh.settings import SshSettings

# Reads the whole script from stdin, then runs it: bash reads a script on a pipe one byte at a
# time, and a command in the script that reads stdin would eat the rest of it.
RUN_STDIN_SCRIPT = ("bash", "-c", 'eval "$(cat)"')


@dataclass(frozen=True)
class Result:
    status: int  # the remote exit status; -1 when the command ended without one
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == 0

    def message(self) -> str:
        """What the command said, stderr first, on one line for an error message."""
        text = (self.stderr.strip() or self.stdout.strip()).replace("\n", " | ")
        return text[:500] or f"exit status {self.status}"


def host_keys(known_hosts: str) -> paramiko.HostKeys:
    """The known_hosts lines as paramiko keys; ValueError for a line that is not one."""
    keys = paramiko.HostKeys()
    for number, line in enumerate(known_hosts.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno=number)
        except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError, IndexError) as exc:
            raise ValueError(f"known_hosts line {number} is not a host key line: {exc}") from exc
        if entry is None or entry.key is None:
            raise ValueError(f"known_hosts line {number} is not a host key line (hosts, key type, base64 key)")
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    if not keys:
        raise ValueError("known_hosts holds no host key")
    return keys


class _NotSent(Exception):
    """The connection failed before the command reached the remote side: sending it again is safe."""


class SshTransport:
    def __init__(self, settings: SshSettings) -> None:
        self.settings = settings
        self._keys = host_keys(settings.known_hosts)
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"{self.settings.user}@{self.settings.host}:{self.settings.port}"

    def run(
        self, argv: Sequence[str], *, stdin: str | None = None, retry: bool = False, timeout: float | None = None
    ) -> Result:
        """Run argv on the login node. FabricError(retryable=True) when the connection fails.

        retry=True: the command is safe to run twice (a read), so a connection that dropped while it
        ran is reopened and the command run again, once.
        """
        command = shlex.join(argv)
        for attempt in (1, 2):
            try:
                return self._exec(command, stdin, timeout or self.settings.command_timeout_s)
            except _NotSent as exc:
                self._drop()
                if attempt == 2:
                    raise FabricError(f"{self.where}: {exc}", retryable=True) from exc
            except (paramiko.SSHException, EOFError, OSError) as exc:
                self._drop()
                if not retry or attempt == 2:
                    raise FabricError(
                        f"{self.where}: the connection failed while running {argv[0]}, so whether it ran is"
                        f" not known: {exc!r}",
                        retryable=True,
                    ) from exc
        raise AssertionError("unreachable")

    def run_script(self, script: str, *, retry: bool = False, timeout: float | None = None) -> Result:
        """Run a bash script sent on stdin (so it can be of any length and hold any bytes)."""
        return self.run(RUN_STDIN_SCRIPT, stdin=script, retry=retry, timeout=timeout)

    def close(self) -> None:
        self._drop()

    def open_tunnel(self, host: str, port: int) -> paramiko.Channel:
        """A channel to host:port as the login node reaches it (SSH's direct-tcpip, as `ssh -L` opens);
        FabricError(retryable=True) when the connection or the login node refuses."""
        for attempt in (1, 2):
            try:
                transport = self._connected().get_transport()
                if transport is None or not transport.is_active():
                    raise _NotSent("the connection is closed")
                timeout = self.settings.connect_timeout_s
                return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
            except (_NotSent, paramiko.SSHException, EOFError, OSError) as exc:
                self._drop()
                if attempt == 2 or isinstance(exc, paramiko.ChannelException):
                    raise FabricError(
                        f"{self.where}: cannot reach {host}:{port} through it: {exc!r}", retryable=True
                    ) from exc
        raise AssertionError("unreachable")

    def _exec(self, command: str, stdin: str | None, timeout: float) -> Result:
        client = self._connected()
        try:
            transport = client.get_transport()
            if transport is None or not transport.is_active():
                raise _NotSent("the connection is closed")
            channel = transport.open_session(timeout=self.settings.connect_timeout_s)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise _NotSent(f"cannot open a session: {exc!r}") from exc
        with channel:
            channel.settimeout(timeout)
            channel.exec_command(command)
            if stdin is not None:
                channel.sendall(stdin.encode())
            channel.shutdown_write()  # EOF: sbatch and cat read their stdin to the end
            try:
                # stdout to its end, then stderr, which is complete once stdout is (both end with the
                # channel's EOF). Our commands write little to stderr, far below the channel's window.
                stdout = _read_all(channel.recv)
                stderr = _read_all(channel.recv_stderr)
            except TimeoutError as exc:
                raise FabricError(
                    f"{self.where}: {command[:80]} did not finish within {timeout:g} s", retryable=True
                ) from exc
            status = channel.recv_exit_status()
        return Result(status, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def _connected(self) -> paramiko.SSHClient:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if client is not None and transport is not None and transport.is_active():
                return client
            self._drop_locked()
            self._client = self._connect()
            return self._client

    def _connect(self) -> paramiko.SSHClient:
        s = self.settings
        client = paramiko.SSHClient()
        for name, by_type in self._keys.items():
            for key_type, key in by_type.items():
                client.get_host_keys().add(name, key_type, key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            key = paramiko.PKey.from_path(s.key_file)
        except (OSError, paramiko.SSHException) as exc:
            raise _NotSent(f"cannot read the private key {s.key_file}: {exc}") from exc
        try:
            client.connect(
                s.host,
                port=s.port,
                username=s.user,
                pkey=key,
                allow_agent=False,
                look_for_keys=False,
                timeout=s.connect_timeout_s,
                banner_timeout=s.connect_timeout_s,
                auth_timeout=s.connect_timeout_s,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise FabricError(
                f"{self.where}: refused: the host key it showed does not match the fabric's known_hosts"
                f" (it showed {exc.key.get_name()} {exc.key.get_base64()[:24]}...)",
                retryable=True,  # IT fixes the settings; the work waits meanwhile
            ) from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            raise FabricError(f"{self.where}: the login node refused the key: {exc}", retryable=True) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                raise FabricError(
                    f"{self.where}: refused: the fabric's known_hosts has no key for this host", retryable=True
                ) from exc
            raise _NotSent(f"cannot connect: {exc!r}") from exc
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(s.keepalive_s)
        return client

    def _drop(self) -> None:
        with self._lock:
            self._drop_locked()

    def _drop_locked(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _read_all(recv: Callable[[int], bytes]) -> bytes:
    """Everything a channel stream (Channel.recv or recv_stderr) gives until EOF; TimeoutError past its timeout."""
    chunks = []
    while chunk := recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
