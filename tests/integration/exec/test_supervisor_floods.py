"""A program that floods its supervisor cannot exhaust the host process the supervisor runs in.

The supervisor of a local run lives in the host's process (the API's or a worker's), as it does here: this test
process is the host. Each test runs a hostile program in a real bubblewrap sandbox; once its flood is in place it
calls ``t.hold``, and while that call is held the test measures this process (its resident memory, its open
descriptors) and runs another tenant's program, whose 400 tool calls to its own supervisor are timed inside its
sandbox. The same tenant program runs alone before and after, in the same test: the slower of the two is the
baseline (the machine is shared, and a sub-millisecond percentile moves with it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import textwrap
from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from berth.default_plugins.exec.local import LocalBackend
from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecRun, ExecService

pytestmark = pytest.mark.sandbox

MIB = 1024 * 1024
HOSTILE_LIMITS = ExecLimits(timeout_s=120, memory_mb=512, cpu_s=60, processes=32, file_size_mb=4)
TENANT_LIMITS = ExecLimits(timeout_s=60, memory_mb=256, cpu_s=30, processes=32, file_size_mb=4)
RSS_GROWTH_CAP = 64 * MIB
FD_GROWTH_CAP = 64
P99_FACTOR = 10
"""How much slower another tenant's 99th-percentile tool call may be during a flood than without one: generous,
the machine is shared; without the caps the floods cost hundreds of MiB or thousands of descriptors instead."""
P99_ALONE_FLOOR = 0.010
"""The tenant's p99 alone is read as at least 10 ms: alone it is 0.4-4 ms, so ten times it is within a loaded
machine's scheduling noise; the floods this file guards against stalled the loop for 0.9-1.3 s."""
STALL_BOUND = 0.3
"""A flooded p99 below this passes whatever the p99 alone: the floods this file guards against stalled the loop
for 0.9-1.3 s, while the parallel suite on a slow two-core machine (its 10M-addition loop 0.55 s) put 156 ms on a
flooded p99 whose run alone took 8 ms (alone 11.6 ms in the same run)."""

# What every hostile program starts with: the run's socket, its token (as any program can read it from the
# bootstrap's module), the frames written by hand, and the program's own connection, opened before the flood.
PRELUDE = """
import json, os, selectors, socket, struct, threading, time
from berth_exec import tools

PATH = os.environ["SUPERVISOR_SOCKET_PATH"]
TOKEN = tools._target[1]
tools.call("t.echo", text="before the flood")


def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def hello(token=TOKEN):
    return frame({"v": 2, "op": "hello", "token": token})


def unfinished(size):
    # the header of a frame of `size` bytes and all of its body but the last byte
    return struct.pack(">I", size) + b"x" * (size - 1)


def push(sockets, data):
    # write `data` to every socket, as much as each takes, until nothing has moved for 2 s
    left = {sock: memoryview(data) for sock in sockets}
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_WRITE)
    while left:
        ready = selector.select(timeout=2)
        if not ready:
            break
        for key, _ in ready:
            sock = key.fileobj
            try:
                sent = sock.send(left[sock][: 1 << 20])
            except OSError:  # refused and closed
                sent = len(left[sock])
            left[sock] = left[sock][sent:]
            if not left[sock]:
                selector.unregister(sock)
                del left[sock]
    selector.close()


def answer_code(sock):
    # the code of the first frame the supervisor sent on `sock` (by now), or what happened instead
    sock.setblocking(False)
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return "closed" if not data else "cut"
            data += chunk
    except BlockingIOError:
        return "no answer"
    except OSError as error:
        return type(error).__name__
    message = json.loads(data[4 : 4 + struct.unpack(">I", data[:4])[0]])
    return "ok" if message.get("ok") else message["error"]["code"]
"""


class FloodTools:
    """``t.echo`` answers with its params; ``t.hold`` blocks until the test releases it."""

    def __init__(self) -> None:
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    @property
    def tool_ids(self) -> Collection[str]:
        return {"t.echo", "t.hold"}

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        if tool_id == "t.hold":
            self.holding.set()
            await self.release.wait()
            return "released"
        return {"echo": params}

    async def read(self, path: str) -> str:
        return ""


TENANT_PROGRAM = """
import json, time
from berth_exec import tools

tools.call("t.echo", text="warm")
latencies = []
for number in range(400):
    started = time.perf_counter()
    tools.call("t.echo", number=number)
    latencies.append(time.perf_counter() - started)
latencies.sort()
print(json.dumps({"p50": latencies[200], "p99": latencies[395], "calls": len(latencies)}))
"""


def resident_bytes() -> int:
    """This process's resident memory (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def open_descriptors() -> int:
    """How many descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


@dataclass
class HostGauge:
    """This process's memory and descriptors: at the start, and the highest seen while sampling."""

    rss_before: int = field(default_factory=resident_bytes)
    fds_before: int = field(default_factory=open_descriptors)
    rss_peak: int = 0
    fds_peak: int = 0

    def sample(self) -> None:
        self.rss_peak = max(self.rss_peak, resident_bytes())
        self.fds_peak = max(self.fds_peak, open_descriptors())

    @asynccontextmanager
    async def sampling(self) -> AsyncIterator[None]:
        """Sample every few milliseconds for the block (the supervisor's reads happen between samples)."""

        async def keep_sampling() -> None:
            while True:
                self.sample()
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(keep_sampling())
        try:
            yield
        finally:
            sampler.cancel()
            self.sample()


@dataclass(frozen=True)
class FloodFigures:
    """What a flood did to the host and to another tenant."""

    printed: dict[str, Any]
    rss_growth: int
    fds_growth: int
    p99_alone: float
    p99_flooded: float


@pytest.fixture
def service() -> Iterator[ExecService]:
    service = ExecService(root=Path("/tmp") / f"berth-exec-floods-{os.getpid()}")
    yield service
    shutil.rmtree(service.root, ignore_errors=True)


async def tenant_p99(service: ExecService) -> float:
    """Another tenant's run: 400 tool calls to its own supervisor, timed in its sandbox; their 99th percentile."""
    result = await service.run(
        textwrap.dedent(TENANT_PROGRAM),
        backend=LocalBackend(isolation="bwrap"),
        limits=TENANT_LIMITS,
        bundle_id="tenant",
        dispatch=FloodTools(),
    )
    assert result.envelope.ok, result.envelope.report_text
    return float(json.loads(result.envelope.user_out_tail.strip().splitlines()[-1])["p99"])


async def flood(service: ExecService, program: str) -> FloodFigures:
    """Run the hostile ``program`` (after :data:`PRELUDE`); while it holds its flood, gauge the host and time the
    other tenant; return the figures and what the program printed last."""
    p99_before = await tenant_p99(service)
    tools = FloodTools()
    gauge = HostGauge()
    hostile = asyncio.create_task(
        service.run(
            textwrap.dedent(PRELUDE) + textwrap.dedent(program),
            backend=LocalBackend(isolation="bwrap"),
            limits=HOSTILE_LIMITS,
            bundle_id="hostile",
            dispatch=tools,
        )
    )
    try:
        async with gauge.sampling():
            holding = asyncio.create_task(tools.holding.wait())
            await asyncio.wait({hostile, holding}, return_when=asyncio.FIRST_COMPLETED)
            if not holding.done():
                holding.cancel()
                run: ExecRun = hostile.result()
                raise AssertionError(f"the hostile program ended before its flood was held: {run.envelope}")
            p99_flooded = await tenant_p99(service)
            tools.release.set()
            run = await hostile
    finally:
        tools.release.set()
        if not hostile.done():
            hostile.cancel()
    assert run.envelope.ok, run.envelope.report_text
    p99_alone = max(p99_before, await tenant_p99(service))
    figures = FloodFigures(
        printed=json.loads(run.envelope.user_out_tail.strip().splitlines()[-1]),
        rss_growth=gauge.rss_peak - gauge.rss_before,
        fds_growth=gauge.fds_peak - gauge.fds_before,
        p99_alone=p99_alone,
        p99_flooded=p99_flooded,
    )
    print(  # the figures the docs quote (pytest -s shows them)
        f"\nRSS {gauge.rss_before / MIB:.0f} MiB -> peak {gauge.rss_peak / MIB:.0f} MiB, "
        f"fds {gauge.fds_before} -> peak {gauge.fds_peak}, tenant p99 {p99_alone * 1000:.2f} ms alone, "
        f"{p99_flooded * 1000:.2f} ms flooded; program: {figures.printed}"
    )
    return figures


def assert_harmless(figures: FloodFigures) -> None:
    """The host's memory and descriptors stayed bounded and the other tenant was served about as fast."""
    assert figures.rss_growth < RSS_GROWTH_CAP, f"the host grew by {figures.rss_growth / MIB:.0f} MiB"
    assert figures.fds_growth < FD_GROWTH_CAP, f"the host opened {figures.fds_growth} more descriptors"
    allowed = max(P99_FACTOR * max(figures.p99_alone, P99_ALONE_FLOOR), STALL_BOUND)
    assert figures.p99_flooded < allowed, (figures.p99_alone, figures.p99_flooded)


async def test_a_hundred_stalled_frames_hold_at_most_the_runs_allowance(service: ExecService) -> None:
    figures = await flood(
        service,
        """
        connections, queue_full = [], 0
        for _ in range(100):
            sock = socket.socket(socket.AF_UNIX)
            sock.setblocking(False)
            try:
                sock.connect(PATH)
                connections.append(sock)
            except BlockingIOError:  # the supervisor's listen queue is full
                queue_full += 1
                sock.close()
        push(connections, hello() + unfinished(1024 * 1024 - 64))  # each as large as a request may be
        tools.call("t.hold")
        print(json.dumps({"connected": len(connections), "queue_full": queue_full}))
        """,
    )
    assert_harmless(figures)
    # 8 served (the program's own included), at most 9 waiting in the listen queue: every other connect refused
    assert figures.printed["connected"] <= 17
    assert figures.printed["connected"] + figures.printed["queue_full"] == 100


async def test_thousands_of_connections_cost_the_host_a_few_descriptors(service: ExecService) -> None:
    figures = await flood(
        service,
        """
        opened, refused = [], 0
        stop = threading.Event()

        def connect_until_stopped():
            global refused
            while not stop.is_set() and len(opened) < 5000:
                sock = socket.socket(socket.AF_UNIX)
                sock.setblocking(False)
                try:
                    sock.connect(PATH)
                    opened.append(sock)
                except BlockingIOError:  # the supervisor's listen queue is full
                    sock.close()
                    refused += 1
                    time.sleep(0.001)

        connecting = threading.Thread(target=connect_until_stopped)
        connecting.start()
        while connecting.is_alive() and refused < 100:  # the flood is in place: connecting no longer succeeds
            time.sleep(0.01)
        tools.call("t.hold")
        stop.set()
        connecting.join()
        print(json.dumps({"opened": len(opened), "refused": refused}))
        """,
    )
    assert_harmless(figures)
    assert figures.printed["opened"] <= 17  # 8 served (the program's own included), 9 in the listen queue
    assert figures.printed["refused"] >= 100


async def test_a_deeply_nested_frame_is_a_bad_request_found_without_recursion(service: ExecService) -> None:
    figures = await flood(
        service,
        """
        def deep_call(depth):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(PATH)
            sock.sendall(hello())
            welcome = answer_code_blocking(sock)
            params = b'{"deep":' + b"[" * depth + b"]" * depth + b"}"
            body = b'{"v":2,"id":1,"op":"call","tool_id":"t.echo","params":' + params + b"}"
            try:
                sock.sendall(struct.pack(">I", len(body)) + body)
            except OSError:
                pass
            code = answer_code_blocking(sock)
            sock.close()
            return welcome, code

        def answer_code_blocking(sock):
            sock.setblocking(True)
            sock.settimeout(60)
            header = b""
            while len(header) < 4:
                chunk = sock.recv(4 - len(header))
                if not chunk:
                    return "closed"
                header += chunk
            (length,) = struct.unpack(">I", header)
            data = b""
            while len(data) < length:
                data += sock.recv(length - len(data))
            message = json.loads(data)
            return "ok" if message.get("ok") else message["error"]["code"]

        first = deep_call(512 * 1024 - 64)  # a 1 MiB frame of brackets, the largest a request may be
        codes = set()
        stop = threading.Event()

        def keep_sending():
            while not stop.is_set():
                codes.add(deep_call(100_000)[1])

        sending = threading.Thread(target=keep_sending)
        sending.start()
        tools.call("t.hold")
        stop.set()
        sending.join()
        print(json.dumps({"first": first, "during": sorted(codes), "after": tools.call("t.echo", text="still")}))
        """,
    )
    assert_harmless(figures)
    assert figures.printed["first"] == ["ok", "bad_request"]
    assert figures.printed["during"] == ["bad_request"]
    assert figures.printed["after"] == {"echo": {"text": "still"}}


async def test_frames_without_the_token_are_never_buffered_beyond_the_hello_cap(service: ExecService) -> None:
    figures = await flood(
        service,
        """
        SIZE = 8 * 1024 * 1024 - 64
        kinds = {
            # a request without a hello: what version 1 sent, the right token inside an 8 MiB frame
            "token_in_a_big_frame": struct.pack(">I", SIZE) + (b'{"v":1,"token":"' + TOKEN.encode() + b'",').ljust(
                SIZE - 1
            ),
            "no_token": unfinished(SIZE),
            "wrong_token": hello("forged") + unfinished(SIZE),
            "big_hello": frame({"v": 2, "op": "hello", "token": "forged" + "x" * SIZE})[:-1],
        }
        connections = []
        for kind, data in kinds.items():
            for _ in range(25):
                sock = socket.socket(socket.AF_UNIX)
                sock.setblocking(False)
                while True:
                    try:
                        sock.connect(PATH)
                        break
                    except BlockingIOError:  # the listen queue is full while the supervisor serves its cap
                        time.sleep(0.001)
                try:
                    sock.send(data[: 1 << 16])
                except OSError:
                    pass
                connections.append((kind, sock, data))
        for kind, data in kinds.items():
            push([sock for k, sock, _ in connections if k == kind], data[1 << 16 :])
        tools.call("t.hold")
        answers = {}
        for kind, sock, _ in connections:
            answers.setdefault(kind, set()).add(answer_code(sock))
        print(json.dumps({kind: sorted(codes) for kind, codes in answers.items()}))
        """,
    )
    assert_harmless(figures)
    assert figures.printed == {
        "token_in_a_big_frame": ["payload_too_large"],
        "no_token": ["payload_too_large"],
        "wrong_token": ["unauthorized"],
        "big_hello": ["payload_too_large"],
    }


async def test_a_stream_of_big_valid_frames_does_not_stall_the_hosts_event_loop(service: ExecService) -> None:
    figures = await flood(
        service,
        """
        # 1 MiB frames (the largest a request may be) of small values (the costliest JSON to decode), sent back to
        # back on several connections
        # with the run's token, each for a tool the bundle does not have (the answer is small: only the decoding
        # costs the host)
        params = b'{"xs":[' + b"0," * (512 * 1024 - 64) + b'0]}'
        body = b'{"v":2,"id":1,"op":"call","tool_id":"t.nope","params":' + params + b"}"
        request = struct.pack(">I", len(body)) + body
        stop = threading.Event()
        answers = []

        def keep_sending():
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(PATH)
            sock.sendall(hello())
            reader = sock.makefile("rb")
            def read_answer():
                (length,) = struct.unpack(">I", reader.read(4))
                return json.loads(reader.read(length))
            read_answer()
            while not stop.is_set():
                sock.sendall(request)
                answers.append(read_answer()["error"]["code"])
            sock.close()

        senders = [threading.Thread(target=keep_sending) for _ in range(3)]
        for sender in senders:
            sender.start()
        while len(answers) < 3:
            time.sleep(0.01)
        tools.call("t.hold")
        stop.set()
        for sender in senders:
            sender.join()
        print(json.dumps({"answers": len(answers), "codes": sorted(set(answers))}))
        """,
    )
    assert_harmless(figures)
    assert figures.printed["codes"] == ["tool_not_allowed"]
