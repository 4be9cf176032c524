"""HTTP/1.1 over asyncio streams, as small as the sidecar needs: one request, its status, headers and body.

The sidecar speaks HTTP to two peers without a client library (each would cost megabytes of RSS in
every training pod): the Kubernetes API server (`apiserver`, TCP and TLS) and torch's worker control
plane (`capture`, a unix socket). Both use this: write a request head, read the status line and the
headers, then the body (chunked, sized by Content-Length, or up to the end of the connection), each
read bounded in time (`within`) and the body in bytes. Errors are raised through the caller's
`error(message)` so each peer keeps its own exception hierarchy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
ErrorFactory = Callable[[str], Exception]


async def within(aw: Awaitable[T], seconds: float) -> T:
    """`asyncio.wait_for` without its Python 3.11 flaw: when the awaited I/O completes in the same
    loop iteration as a cancellation, wait_for returns the result and drops the cancellation, so a
    cancelled watch could go on forever (seen as a rare hang of the tests). `asyncio.timeout` does not.
    """
    async with asyncio.timeout(seconds):
        return await aw


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


async def send(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    head: Sequence[str],
    wait: float,
    error: ErrorFactory,
) -> Response:
    """Write a request head (its lines, without the blank line) and read the answer's status and headers.
    The connection is closed when this raises."""
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await within(writer.drain(), wait)
        status_line = await within(reader.readline(), wait)
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise error(f"not an HTTP answer: {status_line[:80]!r}")
        fields: dict[str, str] = {}
        while True:
            line = await within(reader.readline(), wait)
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            fields[key.strip().lower()] = value.strip()
        return Response(int(parts[1]), fields, reader, writer)
    except BaseException:
        writer.close()
        raise


async def chunks(response: Response, wait: float, limit: int, error: ErrorFactory) -> AsyncIterator[bytes]:
    """The body's parts as they come (each read within `wait`); `error` once it passes `limit` bytes."""
    reader, total = response.reader, 0
    if response.headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await within(reader.readline(), wait)
            if not size_line:
                raise error("connection closed mid-stream")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return
            chunk = await within(reader.readexactly(size + 2), wait)
            total += size
            if total > limit:
                raise error(f"answer over {limit} bytes")
            yield chunk[:-2]
    elif "content-length" in response.headers:
        length = int(response.headers["content-length"])
        if length > limit:
            raise error(f"answer over {limit} bytes")
        yield await within(reader.readexactly(length), wait)
    else:
        while chunk := await within(reader.read(65536), wait):
            total += len(chunk)
            if total > limit:
                raise error(f"answer over {limit} bytes")
            yield chunk


async def body(response: Response, wait: float, limit: int, error: ErrorFactory) -> bytes:
    return b"".join([c async for c in chunks(response, wait, limit, error)])
