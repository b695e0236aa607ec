"""A played task's network, as Fargate's ``awsvpc`` mode gives one (used by :class:`berth_aws.testing.TaskPlayer`).

On Fargate a task's containers share a network namespace of their own behind the task's ENI, held by a pause
container, and reach only what the subnet's routes and the security group allow: for an exec task, the S3 and
Secrets Manager endpoints. :class:`TaskNetwork` gives a task played in a local Docker engine the same shape: a
pause container (the task's image running ``sleep infinity``) started with ``--network none`` holds a namespace
with only ``lo``; the task's container joins it (``network_mode: container:<pause>``); and the AWS endpoint's own
address on that ``lo`` (moto's ``127.0.0.1:<port>``, so the task's ``BERTH_EXEC_ENDPOINT_URL`` works unchanged) is
relayed to moto in the host's namespace. Nothing else has a route from there: not the host's loopback services,
not its other addresses, not 169.254.169.254.

The relay's listening socket is made by a thread of this process that enters the pause container's namespace
(``setns``) for that one call: a socket belongs to the namespace it was made in, so it listens there while every
other socket of the relay lives in the host's. The socket exists before the task's container starts, so the task's
first call never races it. This needs root (``CAP_SYS_ADMIN``) and an engine on this machine (its containers' pids
in this pid namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlparse

CLONE_NEWNET: Final = 0x40000000
CHUNK: Final = 64 * 1024


def endpoint_address(url: str) -> tuple[str, int]:
    """``http://127.0.0.1:5000`` → ``("127.0.0.1", 5000)``; the host must be a loopback address (it is made again
    on the task's own ``lo``)."""
    parsed = urlparse(url)
    if parsed.hostname is None or parsed.port is None or not ipaddress.ip_address(parsed.hostname).is_loopback:
        raise ValueError(f"the task's endpoint must be http://<loopback address>:<port>, not '{url}'")
    return parsed.hostname, parsed.port


def listen_in_namespace(namespace: str, address: tuple[str, int]) -> socket.socket:
    """A TCP socket listening on ``address`` in the network namespace at ``namespace`` (``/proc/<pid>/ns/net``)."""
    made: dict[str, Any] = {}

    def make() -> None:  # only this short-lived thread enters the namespace
        try:
            with open(namespace, "rb") as handle:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns({namespace}): {os.strerror(error)}")
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.bind(address)
            listener.listen(64)
            made["socket"] = listener
        except OSError as error:
            made["error"] = error

    thread = threading.Thread(target=make, name="berth-task-network-setns")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    listener: socket.socket = made["socket"]
    return listener


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until ``source`` ends; then end ``sink``'s writing side."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@dataclass
class TaskNetwork:
    """One task's network namespace: only ``lo``, and on it the AWS endpoint, relayed to the host's."""

    docker: Any
    image: str
    endpoint: str
    """The URL the task calls AWS at (moto's, on a loopback address of the host)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    pause: Any = None
    listener: socket.socket | None = None
    connections: list[socket.socket] = field(default_factory=list)

    def open(self) -> str:
        """Start the pause container and the relay; the ``network_mode`` for the task's container."""
        address = endpoint_address(self.endpoint)
        self.pause = self.docker.containers.create(  # create, not run: run would pull an image the engine lacks
            self.image,
            ["sleep", "infinity"],
            network_mode="none",
            init=True,
            read_only=True,
            cap_drop=["ALL"],
            labels=dict(self.labels),
        )
        try:
            self.pause.start()
            self.pause.reload()
            self.listener = listen_in_namespace(f"/proc/{self.pause.attrs['State']['Pid']}/ns/net", address)
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self.relay, args=(self.listener, address), daemon=True).start()
        return f"container:{self.pause.id}"

    def relay(self, listener: socket.socket, address: tuple[str, int]) -> None:
        """Accept the task's connections and join each to a new connection to the endpoint in the host's namespace."""
        while True:
            try:
                inside, _ = listener.accept()
            except OSError:  # closed
                return
            try:
                outside = socket.create_connection(address)
            except OSError:
                inside.close()
                continue
            self.connections += [inside, outside]
            threading.Thread(target=pump, args=(inside, outside), daemon=True).start()
            threading.Thread(target=pump, args=(outside, inside), daemon=True).start()

    def close(self) -> None:
        """Stop the relay and remove the pause container (the namespace goes with its last holder)."""
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in the relay's thread
            self.listener.close()
            self.listener = None
        for connection in self.connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        self.connections.clear()
        if self.pause is not None:
            with contextlib.suppress(Exception):
                self.pause.remove(force=True)
            self.pause = None
