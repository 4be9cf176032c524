"""Small helpers every tier uses, one name each.

* `HANG_GUARD`: how long a test waits for what must happen before it fails. A deadline against a hang,
  never a timing assertion: on a slow machine a test takes longer, it does not pass or fail differently.
* `eventually(check, what)`: wait until `check()` is truthy (polling; `check` may return an awaitable,
  e.g. a blocking call in `asyncio.to_thread`), fail naming `what` at the guard.
* `GLOO_PEER`: the victim's line when a peer in a gloo collective died (torch 2.13's wording).
* `jwt(exp, aud, jti)`: a bearer token shaped like a projected ServiceAccount token (the aggregator reads
  its unverified claims only to refuse early; the emulator's TokenReview decides).
* `free_port()`: a loopback port that was free a moment ago, only for servers that cannot bind port 0
  and report the port they got (Prometheus, a process started by its command line); the port can be
  taken between the check and the use, so prefer binding 0 in the server under test and reading it back.
* `report(port, register, events)`: one sidecar's stream to an aggregator, every event acknowledged.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import socket
from collections.abc import Callable
from typing import Any

HANG_GUARD = 30.0
GLOO_PEER = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[10.0.0.11]:4455. This is typically caused by a remote worker crashing."
)


async def eventually(
    check: Callable[[], Any],
    what: str = "condition",
    *,
    within: float = HANG_GUARD,
    every: float = 0.01,
) -> Any:
    """Wait until `check()` is truthy and return its value (polled every `every` seconds)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def report(port: int, reg: Any, events: list[Any]) -> list[str]:
    """A sidecar's stream to an aggregator on `port`: register (`pb.Register`), send each `pb.Event`, wait
    for every ack, close (as a flushed sidecar exits). gRPC is imported here: most tiers need none."""
    import grpc

    from podmortem.protocol.v1 import collector_pb2 as pb
    from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc

    acked: list[str] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
        await call.write(pb.SidecarMessage(register=reg))
        assert (await call.read()).WhichOneof("body") == "registered"
        for event in events:
            await call.write(pb.SidecarMessage(event=event))
            reply = await call.read()
            acked.extend(reply.ack.event_ids)
        await call.done_writing()
    return acked


def jwt(exp: float, aud: str = "podmortem", jti: int = 0) -> str:
    """A token shaped like the kubelet's (its unverified claims are read only to refuse early and to bound
    the cache; the emulator's TokenReview decides)."""

    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'exp': int(exp), 'aud': [aud], 'jti': jti})}.c2lnbmF0dXJl"
