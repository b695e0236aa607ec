"""Test support: a scratch PostgreSQL database, created through the server's ``postgres`` database and dropped
after (used by this project's tests, its benchmarks, and by bundle authors who test against distributed storage),
and :class:`PostgresProxy`, a TCP proxy a test cuts to put the stores through an outage of the server.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth_postgres.migrations import migrate

__all__ = ["SERVER", "PostgresProxy", "ProxyCut", "async_scratch_database", "scratch_database"]

SERVER: str = "postgresql://postgres@127.0.0.1:5432"
"""The local test server (trust auth); a database name is appended."""


async def _admin(server: str, statement: str) -> None:
    connection = await asyncpg.connect(f"{server}/postgres")
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@asynccontextmanager
async def async_scratch_database(server: str = SERVER, *, migrated: bool = True) -> AsyncIterator[str]:
    """Create ``berth_test_<random>`` (with every migration applied unless ``migrated=False``), yield its DSN,
    drop it (``WITH (FORCE)``: connections left open are ended) afterwards."""
    name = f"berth_test_{secrets.token_hex(6)}"
    await _admin(server, f'CREATE DATABASE "{name}"')
    try:
        if migrated:
            await migrate(f"{server}/{name}")
        yield f"{server}/{name}"
    finally:
        await _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def scratch_database(server: str = SERVER, *, migrated: bool = False) -> Iterator[str]:
    """:func:`async_scratch_database` for synchronous code (no event loop may be running)."""
    name = f"berth_test_{secrets.token_hex(6)}"
    asyncio.run(_admin(server, f'CREATE DATABASE "{name}"'))
    try:
        if migrated:
            asyncio.run(migrate(f"{server}/{name}"))
        yield f"{server}/{name}"
    finally:
        asyncio.run(_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


ProxyCut = Literal["refuse", "blackhole"]
"""How a cut :class:`PostgresProxy` treats new connections: ``refuse`` them (nothing listens on its port, as when
the server is down: connecting fails at once) or ``blackhole`` them (accepted, then never answered, as in a
network partition: connecting hangs until the client's timeout)."""


class PostgresProxy:
    """A TCP proxy in front of a PostgreSQL server that a test cuts and restores, for outages the shared server
    cannot be put through (it cannot be stopped: other tests use it).

    Point a store at :meth:`dsn` (the same DSN through the proxy); :meth:`cut` ends every connection through it,
    as a crashed, restarted or failing-over server does, and refuses (or black-holes) new ones until
    :meth:`restore`. Every process may connect through it (worker processes too), for as long as the event loop
    that started it runs::

        async with async_scratch_database() as direct, PostgresProxy() as proxy:
            store = PostgresConversationStore(proxy.dsn(direct))
            ...
            async with proxy.outage(20.0):  # 20 s without PostgreSQL
                ...
    """

    def __init__(self, upstream: str = SERVER, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """:param upstream: the server's DSN (or ``postgresql://host:port``) the proxy forwards to.
        :param host: the address it listens on; ``port``: its port (0: a free one, kept across cuts)."""
        parts = urlsplit(upstream)
        self.upstream: tuple[str, int] = (parts.hostname or "127.0.0.1", parts.port or 5432)
        """The server's host and port."""
        self.host = host
        self.port = port
        """The port it listens on (a free one is chosen at :meth:`start` when 0)."""
        self.cut_mode: ProxyCut | None = None
        """How it is cut, or None while it forwards."""
        self.accepted = 0
        """Connections accepted so far (forwarded or held)."""
        self.cuts = 0
        """Connections :meth:`cut` ended so far."""
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._held: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def open_connections(self) -> int:
        """Client connections forwarded right now."""
        return len(self._links) // 2

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a URL) with its host and port replaced by the proxy's."""
        parts = urlsplit(dsn)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@{self.host}:{self.port}" if credentials else f"{self.host}:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def start(self) -> None:
        """Listen (and forward)."""
        await self._listen()

    async def aclose(self) -> None:
        """Stop listening and end every connection through the proxy."""
        self.cut_mode = "refuse"
        await self._stop_listening()
        self._end_connections()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def cut(self, mode: ProxyCut = "refuse") -> None:
        """End every connection through the proxy; until :meth:`restore`, refuse or black-hole new ones."""
        self.cut_mode = mode
        if mode == "refuse":
            await self._stop_listening()
        else:  # accept, to hold (it may have been cut with "refuse" before)
            await self._listen()
        self.cuts += self._end_connections()

    async def restore(self) -> None:
        """Forward again (connections held by a ``blackhole`` cut are ended: their clients try again)."""
        self.cut_mode = None
        for writer in list(self._held):
            writer.transport.abort()
        self._held.clear()
        await self._listen()

    @asynccontextmanager
    async def outage(self, seconds: float, mode: ProxyCut = "refuse") -> AsyncIterator[None]:
        """Cut the proxy, run the block, and restore it ``seconds`` after the cut (or when the block ends, if
        later): ``async with proxy.outage(20): ...`` is a 20 s outage during whatever the block starts."""
        loop = asyncio.get_running_loop()
        await self.cut(mode)
        ends = loop.time() + seconds
        try:
            yield
            await asyncio.sleep(max(0.0, ends - loop.time()))
        finally:
            await self.restore()

    def _forwarding(self) -> bool:
        return self.cut_mode is None

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()

    def _end_connections(self) -> int:
        ended = len(self._links) // 2 + len(self._held)
        for writer in [*self._links, *self._held]:
            writer.transport.abort()
        self._links.clear()
        self._held.clear()
        return ended

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if not self._forwarding():  # a blackhole cut (a refusing one does not listen)
            self._held.add(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        if not self._forwarding():  # cut while connecting
            up_writer.transport.abort()
            writer.transport.abort()
            return
        self._links.update((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pump(source, sink, (writer, up_writer)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: tuple[asyncio.StreamWriter, ...]
    ) -> None:
        """Copy ``source`` to ``sink`` until either side ends; then end both sides of the link."""
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in link:
                self._links.discard(writer)
                writer.transport.abort()
