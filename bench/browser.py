"""A real headless Chromium, driven over the DevTools protocol, opening one local page.

`load(path)` starts Debian's `chromium` (`$PODMORTEM_CHROMIUM` overrides) with a fresh profile and
`--remote-debugging-port=0`, attaches to a new tab over the DevTools WebSocket (aiohttp, which podmortem
already depends on, speaks it: no browser-automation package, and none that downloads a browser of its
own), and records while the page loads:

* every console error, uncaught exception and browser log entry at level error (a Content-Security-
  Policy violation is one);
* every network request other than the page's own document;
* the time from navigation to the load event, and the page's own navigation timing;
* what the rendered DOM says (`evaluate`), and a full-page PNG when asked.

Used by the browser tests (`tests/e2e/test_page_browser.py`) and by `bench/page.py`.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
)
START_TIMEOUT = 30.0
MAX_TMP_PATH = 40  # characters of $TMPDIR under which the profile (and its socket) may go
LOAD_TIMEOUT = 30.0


def executable() -> str | None:
    """The Chromium to drive: `$PODMORTEM_CHROMIUM`, else `chromium` on PATH (Debian's package)."""
    return os.environ.get("PODMORTEM_CHROMIUM") or shutil.which("chromium")


@dataclass
class Loaded:
    url: str
    load_seconds: float  # Page.navigate sent -> Page.loadEventFired
    timing: dict[str, float]  # the page's navigation timing (ms): domContentLoaded, loadEventEnd, firstContentfulPaint
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # the `evaluate` expressions' results


class _Session:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.session_id = ""

    async def reader(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.put_nowait(data)

    async def send(self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False) -> Any:
        ident = next(self.ids)
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if self.session_id and not browser:
            msg["sessionId"] = self.session_id
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = fut
        await self.ws.send_str(json.dumps(msg))
        reply = await asyncio.wait_for(fut, LOAD_TIMEOUT)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})


async def _port(profile: Path, proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before serving DevTools")
        if active.exists():
            lines = active.read_text().splitlines()
            if len(lines) >= 2:
                return int(lines[0]), lines[1]
        await asyncio.sleep(0.05)
    raise RuntimeError("chromium did not start DevTools in time")


def _console_text(params: dict[str, Any]) -> str:
    parts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
    return " ".join(parts)


async def _load(
    path: Path, evaluate: dict[str, str], screenshot: Path | None, width: int, height: int, shot_height: int
) -> Loaded:
    binary = executable()
    if binary is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install chromium; or set PODMORTEM_CHROMIUM)")
    url = path.resolve().as_uri()
    # Chromium keeps a unix socket under its own $TMPDIR, and a socket's path has at most 107 bytes: with a
    # long $TMPDIR (pytest's) it aborts at start. Its temporary files go in this directory, under /tmp then.
    base = None if len(tempfile.gettempdir()) <= MAX_TMP_PATH else "/tmp"
    with tempfile.TemporaryDirectory(prefix="podmortem-chromium-", dir=base) as tmp:
        profile = Path(tmp) / "profile"
        log = Path(tmp) / "stderr"
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"]
        with log.open("wb") as err:
            env = {**os.environ, "TMPDIR": tmp}
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            try:
                port, browser_path = await _port(profile, proc)
            except RuntimeError as exc:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"{exc}; its last words: {' | '.join(tail)}") from None
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(f"ws://127.0.0.1:{port}{browser_path}", max_msg_size=0) as ws,
            ):
                s = _Session(ws)
                reader = asyncio.create_task(s.reader())
                try:
                    return await _drive(s, url, evaluate, screenshot, width, height, shot_height)
                finally:
                    try:
                        await s.send("Browser.close", browser=True)
                    except (RuntimeError, TimeoutError, ConnectionError, aiohttp.ClientError):
                        pass
                    reader.cancel()
        finally:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _drive(
    s: _Session,
    url: str,
    evaluate: dict[str, str],
    screenshot: Path | None,
    width: int,
    height: int,
    shot_height: int,
) -> Loaded:
    target = await s.send("Target.createTarget", {"url": "about:blank"}, browser=True)
    attached = await s.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, browser=True)
    s.session_id = attached["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        await s.send(f"{domain}.enable")
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    await s.send("Emulation.setDeviceMetricsOverride", metrics)
    while not s.events.empty():  # about:blank's own events
        s.events.get_nowait()
    errors: list[str] = []
    requests: list[str] = []
    start = time.perf_counter()
    await s.send("Page.navigate", {"url": url})
    loaded_at = None
    deadline = start + LOAD_TIMEOUT
    while loaded_at is None:
        event = await asyncio.wait_for(s.events.get(), max(deadline - time.perf_counter(), 0.01))
        _record(event, url, errors, requests)
        if event["method"] == "Page.loadEventFired":
            loaded_at = time.perf_counter()
    await asyncio.sleep(0.3)  # anything the page would still do after its load event
    while not s.events.empty():
        _record(s.events.get_nowait(), url, errors, requests)
    timing_js = (
        "(() => { const n = performance.getEntriesByType('navigation')[0];"
        " const p = performance.getEntriesByName('first-contentful-paint')[0];"
        " return JSON.stringify({domContentLoaded: n.domContentLoadedEventEnd, loadEventEnd: n.loadEventEnd,"
        " firstContentfulPaint: p ? p.startTime : -1}); })()"
    )
    timing = json.loads(await _eval(s, timing_js))
    values = {name: await _eval(s, expr) for name, expr in evaluate.items()}
    if screenshot is not None:
        metrics = await s.send("Page.getLayoutMetrics")
        full = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = await s.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": min(full["height"], shot_height), "scale": 1},
            },
        )
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    return Loaded(url, loaded_at - start, timing, errors, requests, values)


def _record(event: dict[str, Any], url: str, errors: list[str], requests: list[str]) -> None:
    method, params = event["method"], event.get("params", {})
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        errors.append(f"console.{params['type']}: {_console_text(params)}")
    elif method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        errors.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description', '')}")
    elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        errors.append(f"log: {params['entry'].get('text')}")
    elif method == "Network.requestWillBeSent":
        requested = params.get("request", {}).get("url", "")
        if requested != url:
            requests.append(requested)


async def _eval(s: _Session, expression: str) -> Any:
    result = await s.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
    if "exceptionDetails" in result:
        raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
    return result["result"].get("value")


def load(path: str | os.PathLike[str], **options: Any) -> Loaded:
    """`load_async` (same options) from code that runs no event loop."""
    return asyncio.run(load_async(path, **options))


async def load_async(
    path: str | os.PathLike[str],
    *,
    evaluate: dict[str, str] | None = None,
    screenshot: str | os.PathLike[str] | None = None,
    width: int = 1280,
    height: int = 900,
    shot_height: int = 12000,
) -> Loaded:
    """Open the local file `path` in a fresh headless Chromium and report what happened (see the module);
    the screenshot is the whole page, down to `shot_height` pixels."""
    shot = Path(screenshot) if screenshot else None
    return await _load(Path(path), dict(evaluate or {}), shot, width, height, shot_height)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.browser PAGE [PNG [WIDTH [HEIGHT]]]`: load a page, print what happened, screenshot it
    (WIDTH wide, down to HEIGHT pixels)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    width = int(args[2]) if len(args) > 2 else 1280
    shot_height = int(args[3]) if len(args) > 3 else 12000
    got = load(args[0], screenshot=args[1] if len(args) > 1 else None, width=width, shot_height=shot_height)
    print(json.dumps(got.__dict__, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
