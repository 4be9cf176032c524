"""A flood of streams with bad tokens against one real verdict, black box.

    python -m bench.token_flood [--streams 2000] [--pods 4] [--rounds 2]

A real `podmortem aggregator --kube --auth tokenreview` process (TLS, annotations and Events
published) on the Kubernetes API emulator (tests/support/kube_emulator.py, in a thread of this
process). A PyTorchJob of `--pods` members, each with its own projected token bound to its pod. In
each round the job fails twice on two fresh aggregators: once alone (the baseline) and once while
`--streams` streams, opened at once from a separate process (one TLS channel each), present no token,
distinct garbage, JWTs for another audience, and distinct well-formed JWTs for our audience that the
API server does not know (each needs a TokenReview). The members report once the API server has
received 100 of the flood's TokenReviews (the flood in full swing).

Printed per round: from the members' first report (their sidecars retry a refusal as a sidecar does)
to the last ack, to the verdict file and to `podmortem.io/verdict` on the job, without and with the
flood, the delays the flood added, the flood's endings by gRPC status, and the TokenReviews the API
server received. The targets: a 2,000-stream flood delays the
verdict by <= 1 s and its annotation by <= 2 s, and no stream ends INTERNAL.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import trustme

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle, running_emulator  # noqa: E402
from support.kube_objects import JOB, NS, seed_pytorchjob  # noqa: E402

from podmortem.core.model import ErrorRecord, Termination  # noqa: E402
from podmortem.protocol import wire  # noqa: E402
from podmortem.protocol.v1 import collector_pb2 as pb  # noqa: E402
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc  # noqa: E402

GLOO = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455"


def b64(doc: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


def jwt(exp: float, aud: str = "podmortem", jti: int = 0, pod: tuple[str, str, str] | None = None) -> str:
    """Shaped like a projected token (unsigned: the emulator's TokenReview knows the tokens it bound)."""
    claims: dict[str, object] = {"exp": int(exp), "aud": [aud], "jti": jti}
    if pod is not None:
        ns, name, uid = pod
        claims["kubernetes.io"] = {"namespace": ns, "pod": {"name": name, "uid": uid}}
    return f"{b64({'alg': 'RS256'})}.{b64(claims)}.c2lnbmF0dXJl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the flood, in a process of its own (its CPU does not slow the emulator's thread) ----------------


def flood_tokens(n: int) -> list[str | None]:
    tokens: list[str | None] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            tokens.append(None)
        elif kind == 1:
            tokens.append(f"garbage-{i}-{os.urandom(8).hex()}")
        elif kind == 2:
            tokens.append(jwt(time.time() + 3600, aud="kubernetes", jti=i))
        else:
            tokens.append(jwt(time.time() + 3600, jti=i))  # well formed, ours, unknown to the API
    return tokens


async def _flood(port: int, ca_pem: bytes, n: int, started: Any) -> dict[str, int]:
    creds = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    codes: collections.Counter[str] = collections.Counter()

    async def one(token: str | None, i: int) -> None:
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as channel:
            call = pb_grpc.CollectorStub(channel).Report(metadata=metadata)  # type: ignore[no-untyped-call]
            try:
                reg = pb.Register(job=pb.JobRef(namespace=NS, name=JOB), pod=f"{JOB}-worker-{i % 4}")
                await call.write(pb.SidecarMessage(register=reg))
                await call.read()
                codes["OK"] += 1
            except grpc.aio.AioRpcError as exc:
                codes[exc.code().name] += 1
                if exc.code() == grpc.StatusCode.INTERNAL and codes["INTERNAL"] <= 3:
                    print(f"flood stream {i} ended INTERNAL: {exc.details()!r}", file=sys.stderr)
            except Exception as exc:  # the flood's own failures, counted apart
                codes[f"client:{type(exc).__name__}"] += 1

    tasks = [asyncio.create_task(one(t, i)) for i, t in enumerate(flood_tokens(n))]
    started.set()
    await asyncio.gather(*tasks)
    return dict(codes)


def flood_process(port: int, ca_pem: bytes, n: int, out: str, started: Any) -> None:
    Path(out).write_text(json.dumps(asyncio.run(_flood(port, ca_pem, n, started))))


# -- one job failing ---------------------------------------------------------------------------------


async def member_reports(port: int, ca_pem: bytes, token: str, pod: str, root: bool) -> float:
    """A sidecar: register, error file, termination, all acked; the time of its last ack. Refused with
    UNAVAILABLE (reviews saturated), it retries as the sidecar does (backoff from 0.25 s, doubling)."""
    delay = 0.25
    while True:
        try:
            return await _member_reports(port, ca_pem, token, pod, root)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def _member_reports(port: int, ca_pem: bytes, token: str, pod: str, root: bool) -> float:
    message = "ValueError: bad label 7 in batch 1234" if root else GLOO
    rec = ErrorRecord(
        message=message, exception_type=message.split(":")[0], timestamp=1_800_000_010 + (0 if root else 1)
    )
    events = [
        wire.make_event(wire.error_to_pb(rec), wire.error_event_id(pod, rec)),
        wire.make_event(wire.termination_to_pb(Termination(exit_code=1, reason="Error")), f"{pod}/termination/0"),
    ]
    creds = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as channel:
        call = pb_grpc.CollectorStub(channel).Report(metadata=(("authorization", f"Bearer {token}"),))  # type: ignore[no-untyped-call]
        await call.write(pb.SidecarMessage(register=pb.Register(job=pb.JobRef(namespace=NS, name=JOB), pod=pod)))
        await call.read()
        for event in events:
            await call.write(pb.SidecarMessage(event=event))
            await call.read()
        done = time.monotonic()
        await call.done_writing()
    return done


async def wait_for(check: Any, limit: float = 120.0, step: float = 0.01) -> float:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if check():
            return time.monotonic()
        await asyncio.sleep(step)
    raise TimeoutError("not within the limit")


async def one_failure(api: EmulatorHandle, work: Path, ca: trustme.CA, pods: int, streams: int) -> dict[str, Any]:
    work.mkdir(parents=True)
    job, names = seed_pytorchjob(api, workers=pods)
    tokens = {}
    for name in names:
        uid = str((api.get(PODS, NS, name) or {})["metadata"]["uid"])
        token = jwt(time.time() + 3600, pod=(NS, name, uid))
        api.bind_token(token, NS, name, uid=uid)
        tokens[name] = token
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(work / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(work / "tls.crt"))
    port = free_port()
    cmd = [
        sys.executable, "-m", "podmortem.cli", "aggregator", "--kube", "--auth", "tokenreview",
        "--kubeconfig", str(api.kubeconfig(work / "kubeconfig", NS)), "--namespaces", NS,
        "--listen", f"127.0.0.1:{port}", "--metrics-listen", "", "--tls-cert", str(work / "tls.crt"),
        "--tls-key", str(work / "tls.key"), "--verdict-dir", str(work / "verdicts"), "--quorum-timeout", "120",
        "--kube-publish", "annotations,events", "--ready-file", str(work / "ready"),
    ]  # fmt: skip
    reviews_before = sum(1 for m, p in api.requests() if m == "POST" and "tokenreviews" in p)
    with (work / "aggregator.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    flood = None
    try:
        await wait_for(lambda: (work / "ready").exists(), 60)
        ca_pem = ca.cert_pem.bytes()
        if streams:
            started = multiprocessing.Event()
            flood = multiprocessing.Process(
                target=flood_process, args=(port, ca_pem, streams, str(work / "flood.json"), started)
            )
            flood.start()
            await asyncio.to_thread(started.wait, 60)

            def swinging() -> bool:  # the flood reaches the API: the aggregator is busy reviewing
                seen = sum(1 for m, p in api.requests() if m == "POST" and "tokenreviews" in p) - reviews_before
                return seen >= min(100, streams // 8) or not (flood is not None and flood.is_alive())

            await wait_for(swinging, 120, 0.05)
        failed = time.monotonic()  # the job fails: its members' sidecars report
        acks = await asyncio.gather(
            *(member_reports(port, ca_pem, tokens[n], n, root=(i == 1)) for i, n in enumerate(names))
        )
        last_ack = max(acks)
        verdict = await wait_for(lambda: any((work / "verdicts").glob("*.json")))

        def annotated() -> bool:
            obj = api.get(PYTORCHJOBS, NS, JOB) or {}
            return "podmortem.io/verdict" in ((obj.get("metadata") or {}).get("annotations") or {})

        annotation = await wait_for(annotated, step=0.02)
        doc = json.loads(next((work / "verdicts").glob("*.json")).read_text())
        codes: dict[str, int] = {}
        if flood is not None:
            await asyncio.to_thread(flood.join, 300)
            codes = json.loads((work / "flood.json").read_text())
        reviews = sum(1 for m, p in api.requests() if m == "POST" and "tokenreviews" in p) - reviews_before
        return {
            "verdict": verdict - failed,
            "annotation": annotation - failed,
            "acked": last_ack - failed,
            "root": doc["root_cause"]["pod"],
            "codes": codes,
            "reviews": reviews,
        }
    finally:
        if flood is not None and flood.is_alive():
            flood.kill()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        api.remove(PYTORCHJOBS, NS, JOB)
        for name in names:
            api.remove(PODS, NS, name)
        del job


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--pods", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ns = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"token flood: {os.cpu_count()} cores, load {load:.1f}, {ns.streams} flood streams, a job of {ns.pods} pods")
    ca = trustme.CA()
    bad = 0
    with running_emulator() as api, tempfile.TemporaryDirectory(prefix="podmortem-flood-") as tmp:
        for r in range(ns.rounds):
            calm = await one_failure(api, Path(tmp) / f"calm-{r}", ca, ns.pods, 0)
            flooded = await one_failure(api, Path(tmp) / f"flood-{r}", ca, ns.pods, ns.streams)
            internal = flooded["codes"].get("INTERNAL", 0)
            print(
                f"round {r + 1}: acked {calm['acked']:.3f} -> {flooded['acked']:.3f} s, "
                f"verdict {calm['verdict']:.3f} -> {flooded['verdict']:.3f} s "
                f"(+{flooded['verdict'] - calm['verdict']:.3f}), annotation {calm['annotation']:.3f} -> "
                f"{flooded['annotation']:.3f} s (+{flooded['annotation'] - calm['annotation']:.3f}); "
                f"TokenReviews {calm['reviews']} -> {flooded['reviews']}; flood endings {flooded['codes']}; "
                f"root {flooded['root']}"
            )
            if internal or flooded["root"] != f"{JOB}-worker-1":
                bad += 1
    print(f"load after: {os.getloadavg()[0]:.1f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
