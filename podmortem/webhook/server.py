"""`podmortem webhook`: the HTTPS admission endpoint that injects the sidecar (and, for opted-in batch Jobs and
JobSets, podmortem's retry policy: `retrypolicy.py`), on aiohttp.

`POST /mutate` takes an `admission.k8s.io/v1` AdmissionReview and answers it with the JSONPatch of
`mutation.review` (always `allowed`: the webhook never blocks a pod). `GET /healthz` answers 200 while
serving. Metrics (`podmortem_webhook_reviews_total{outcome}`: injected, already injected, opted out,
not a training pod, unsupported — i.e. let through unchanged — and bad requests) are served on a
separate plain-HTTP address so Prometheus needs no TLS settings for them.

The serving certificate is re-read when its files change (checked every `CERT_CHECK_SECONDS`), since
cert-manager renews it in place in the mounted Secret. SIGTERM or SIGINT stops it gracefully: the
listeners close and requests in flight get `shutdown_grace` seconds to finish.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import ssl
import sys
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from podmortem.webhook import config as config_mod
from podmortem.webhook import mutation, retrypolicy
from podmortem.webhook.config import ConfigError, WebhookConfig

log = logging.getLogger("podmortem.webhook")

BAD_REQUEST = "bad_request"
MAX_BODY_BYTES = 8 << 20  # a pod is at most ~1.5 MiB in etcd; its AdmissionReview carries it once
CERT_CHECK_SECONDS = 30.0


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.reviews = Counter(
            "podmortem_webhook_reviews_total",
            "AdmissionReviews answered, by outcome (every outcome but 'injected' lets the pod through unchanged).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in (*mutation.OUTCOMES, BAD_REQUEST):
            self.reviews.labels(outcome=outcome)
        self.retry_policy = Counter(
            "podmortem_webhook_retry_policy_total",
            "Opted-in batch Jobs and JobSets reviewed, by kind and outcome ('added': podmortem's retry policy "
            "was added; 'restart_on_failure': left alone, its pods use restartPolicy OnFailure).",
            ["kind", "outcome"],
            registry=self.registry,
        )
        for kind in ("Job", "JobSet"):
            for outcome in retrypolicy.OUTCOMES:
                self.retry_policy.labels(kind=kind, outcome=outcome)


def _stamp(paths: tuple[Path, ...]) -> tuple[tuple[float, int, int], ...]:
    out = []
    for p in paths:
        st = p.stat()
        out.append((st.st_mtime, st.st_size, st.st_ino))
    return tuple(out)


class WebhookServer:
    def __init__(self, config: WebhookConfig, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.metrics = WebhookMetrics(registry)
        self.port = 0
        self.metrics_port = 0
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        self._cert_stamp: tuple[tuple[float, int, int], ...] = ()
        self._runner: web.AppRunner | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._reloader: asyncio.Task[None] | None = None

    def load_certificate(self) -> bool:
        """(Re)load the serving certificate when its files changed; True when loaded."""
        paths = (self.config.tls_cert, self.config.tls_key)
        stamp = _stamp(paths)
        if stamp == self._cert_stamp:
            return False
        # New connections use the new chain; open ones keep theirs.
        self._ssl.load_cert_chain(str(self.config.tls_cert), str(self.config.tls_key))
        self._cert_stamp = stamp
        return True

    async def _reload_certificates(self) -> None:
        while True:
            await asyncio.sleep(CERT_CHECK_SECONDS)
            try:
                if self.load_certificate():
                    log.info("serving certificate reloaded from %s", self.config.tls_cert)
            except (OSError, ssl.SSLError) as exc:
                log.error("cannot reload the serving certificate (keeping the current one): %s", exc)

    async def mutate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json(loads=json.loads)
            answer, result = mutation.review(body, self.config.injection)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            if isinstance(exc, RecursionError):  # json recurses once per level of nesting
                exc = ValueError("JSON nested too deeply")
            self.metrics.reviews.labels(outcome=BAD_REQUEST).inc()
            log.warning("bad admission request from %s: %s", request.remote, exc)
            return web.json_response({"error": f"not an admission.k8s.io/v1 AdmissionReview: {exc}"}, status=400)
        req = body["request"]
        obj = req.get("object") if isinstance(req.get("object"), dict) else {}
        meta = obj.get("metadata") or {}
        who = f"{req.get('namespace', '')}/{meta.get('name') or meta.get('generateName', '') + '*'}"
        if result.kind != "Pod":
            self.metrics.retry_policy.labels(kind=result.kind, outcome=result.outcome).inc()
            if result.outcome == retrypolicy.ADDED:
                log.info(
                    "%s %s: retry policy added%s", result.kind, who, f" ({result.reason})" if result.reason else ""
                )
            else:
                log.info("%s %s: retry policy not added (%s): %s", result.kind, who, result.outcome, result.reason)
            return web.json_response(answer)
        self.metrics.reviews.labels(outcome=result.outcome).inc()
        if result.outcome == mutation.UNSUPPORTED:
            log.warning("pod %s left unchanged: %s", who, result.reason)
        elif result.outcome == mutation.INJECTED:
            log.info("pod %s: sidecar injected (%d patch operations)", who, len(result.patch))
        else:
            log.debug("pod %s: %s (%s)", who, result.outcome, result.reason)
        return web.json_response(answer)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def serve_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        self.load_certificate()
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/mutate", self.mutate)
        app.router.add_get("/healthz", self.healthz)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=self.config.shutdown_grace)
        await self._runner.setup()
        host, port = config_mod.split_address(self.config.listen)
        site = web.TCPSite(self._runner, host, port, ssl_context=self._ssl)
        await site.start()
        self.port = _bound_port(self._runner)
        if self.config.metrics_listen:
            metrics_app = web.Application()
            metrics_app.router.add_get("/metrics", self.serve_metrics)
            metrics_app.router.add_get("/healthz", self.healthz)
            self._metrics_runner = web.AppRunner(metrics_app, access_log=None, shutdown_timeout=1.0)
            await self._metrics_runner.setup()
            mhost, mport = config_mod.split_address(self.config.metrics_listen)
            msite = web.TCPSite(self._metrics_runner, mhost, mport)
            await msite.start()
            self.metrics_port = _bound_port(self._metrics_runner)
        self._reloader = asyncio.create_task(self._reload_certificates(), name="certificate-reload")
        log.info("webhook serving HTTPS on %s:%d (metrics %s)", host, self.port, self.metrics_port or "off")

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        if self._runner is not None:
            await self._runner.cleanup()  # closes the listener, lets requests in flight finish
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        log.info("webhook stopped")


def _bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (the configured one may be 0: any free port)."""
    return int(runner.addresses[0][1])


async def serve(config: WebhookConfig, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = WebhookServer(config)
    await server.start()
    try:
        await stop.wait()
        log.info("stop requested: finishing requests in flight")
    finally:
        await server.stop()


def build_parser(parser: argparse.ArgumentParser) -> None:
    config_mod.add_arguments(parser)


def run(ns: argparse.Namespace) -> int:
    try:
        config = config_mod.load(ns)
        for path in (config.tls_cert, config.tls_key):
            if not path.is_file():
                raise ConfigError(f"{path} does not exist or is not a file")
        config = config_mod.with_sidecar_ca(config)
    except ConfigError as exc:
        print(f"podmortem webhook: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(config))
    except ssl.SSLError as exc:
        print(f"podmortem webhook: cannot use {config.tls_cert} / {config.tls_key}: {exc}", file=sys.stderr)
        return 2
    return 0
