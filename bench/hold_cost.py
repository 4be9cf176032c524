"""What the hold costs: the extra seconds a failed pod stays non-terminal while its sidecar waits for its condition.

Plays jobs failing in the kubelet's order on the Kubernetes emulator (tests/support/kubelet_order.py:
error file, container exit, SIGTERM to the native sidecar, the status 0.5 s later; the pod turns Failed
once its sidecar exited) with real sidecar processes and the real aggregator: a user_code root and its
victims, which end 1 s after it. Each round runs the same job twice, with the hold (the default
--hold-timeout) and without it (--hold-timeout 0, as an older sidecar), and prints for every failed pod:

* held: the seconds its sidecar waited for the aggregator's answer (its own log: 'held N s');
* SIGTERM -> exit: when the pod could turn terminal, with and without the hold; their difference is the
  hold's cost to the Job controller (replacement pods wait for a terminal pod under a podFailurePolicy).

p50 and max per role (the root waits for its peers' first evidence; a victim is decided at once), and
whether each pod got the condition it should (exit 1 otherwise).

    python -m bench.hold_cost [--rounds 3] [--pods 4] [--json]
    python -m bench.hold_cost --desk 1024,4096     # the hold desk alone: W pods holding at once
    python -m bench.hold_cost --api 1024,4096      # W pods holding, the aggregator against the API

`--desk` measures the desk's own work for a large job in process: W members registered and placed by a
pod watch, one root raising, W-1 victims echoing; every victim holds at once; the write goes nowhere (no
API: the client's rate limit is the bound there, see docs/kubernetes.md). It prints the seconds until
every hold was answered and the CPU the process spent, to show the desk stays linear in W.

`--api` measures a large job against the API: a W-pod indexed Job and its pods on the emulator, a real
`podmortem aggregator --kube` process (its pod watch places the pods; every publisher on), and the sidecars
played by load-generator processes speaking the sidecar's protocol over real gRPC: each registers with
holds; the root sends its error file and termination and `hold` (timeout 15 s, the sidecar's default), the
victims the same with a peer-closed message 1-2 s later. Printed per role: the seconds from `hold` to its
reply (the extra time the pod stays non-terminal: without the hold its sidecar exits at once; a reply that
never came counts the full 15 s) and the outcomes; when the verdict was decided (its file) and when its
requests (annotations, the job's condition, Events) reached the emulator; the aggregator's CPU and the
emulator's own (a Python server in this process: its limit is not ours); the API requests of the
incident at the emulator, by verb and resource; the conditions on the pods. The kubelet's own status
writes are not played (they are not the aggregator's requests). `--condition-qps N` passes N as the
aggregator's --condition-qps and --condition-burst.

    python -m bench.hold_cost --api 1024,4096

Uses the test emulator (kmock, the dev extra). Run it alone and report the load (`uptime`) with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.kube_emulator import JOBS, PODS, running_emulator
from support.kube_objects import NS, indexed_job, indexed_pod
from support.kubelet_order import GLOO_PEER, our_condition, run_incident

HELD = re.compile(r"\(held ([0-9.]+)s\)")


async def one_round(index: int, pods: int, hold: bool) -> list[dict[str, Any]]:
    with running_emulator() as api, tempfile.TemporaryDirectory(prefix="podmortem-hold-") as tmp:
        job = api.put(JOBS, indexed_job(f"train-{index}", pods))
        seeded = [api.put(PODS, indexed_pod(job, i)) for i in range(pods)]
        root = 1 % pods
        timeouts = None if hold else dict.fromkeys(range(pods), "0")
        _, sidecars = await run_incident(api, Path(tmp), seeded, root=root, hold_timeouts=timeouts)
        out = []
        for i, s in enumerate(sidecars):
            held = next((float(m.group(1)) for line in s.lines if (m := HELD.search(line))), None)
            condition = our_condition(api.get(PODS, NS, s.pod)) or {}
            expected = "podmortem.io/PermanentFailure" if i == root else "podmortem.io/Victim"
            out.append(
                {
                    "pod": s.pod,
                    "role": "root" if i == root else "victim",
                    "hold": hold,
                    "exit_code": s.code,
                    "sigterm_to_exit_s": round(s.exited_at - s.sigterm_at, 3),
                    "held_s": held,
                    "condition": condition.get("type"),
                    "right": s.code == 0 and (condition.get("type") == expected if hold else True),
                }
            )
        return out


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    return f"p50 {statistics.median(values):.2f} s, max {max(values):.2f} s (n={len(values)})"


async def desk_only(pods: int) -> tuple[float, float, int]:
    """(seconds until every hold was answered, CPU seconds, victims answered Victim) for `pods` members."""
    from podmortem.aggregator.holding import HoldDesk
    from podmortem.aggregator.incidents import IncidentBook
    from podmortem.aggregator.running import make_decide
    from podmortem.core.model import ErrorRecord, Termination
    from podmortem.core.podstatus import snapshot
    from podmortem.protocol.v1 import collector_pb2 as pb
    from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

    async def nowhere(namespace: str, pod: str, condition: Any) -> None:
        return None

    book = IncidentBook(make_decide(), lambda d: None, quorum_timeout=600)
    desk = HoldDesk(book, make_decide(), nowhere, peer_wait=5.0)
    keys = []
    for i in range(pods):
        reg = pb.Register(job=pb.JobRef(namespace=NS, name="big", kind="Job"), pod=f"big-{i}", holds=True)
        reg.world_size_hint = pods
        key = book.register(reg)
        desk.pod_seen(key, snapshot({"metadata": {"name": key.pod, "namespace": NS}, "status": {"phase": "Running"}}))
        keys.append(key)
    cpu0, t0 = time.process_time(), time.monotonic()
    for i, key in enumerate(keys):
        text = "ValueError: label 7" if i == 0 else "RuntimeError: Connection closed by peer [10.0.0.1]:29500"
        book.ingest(
            key, make_event(error_to_pb(ErrorRecord(message=text, exception_type=text.split(":")[0])), f"{i}/e")
        )
        book.ingest(key, make_event(termination_to_pb(Termination(exit_code=1, reason="Error")), f"{i}/t"))
    replies = await asyncio.gather(*(desk.hold(k, pb.Hold(seq=1, timeout_seconds=15)) for k in keys))
    victims = sum(r.condition_type == "podmortem.io/Victim" for r in replies)
    return time.monotonic() - t0, time.process_time() - cpu0, victims


# -- --api: a W-pod job against the API emulator, the aggregator as a process -----------------------

HOLD_TIMEOUT = 15.0  # the sidecar's default --hold-timeout
VICTIM_SPREAD = 1.0  # the victims end over this many seconds, starting 1 s after the root


def api_pod(job: dict[str, Any], index: int) -> dict[str, Any]:
    """An indexed Job's pod as the injection webhook leaves it: a native podmortem sidecar."""
    pod: dict[str, Any] = indexed_pod(job, index)
    pod["spec"]["initContainers"] = [
        {
            "name": "podmortem-sidecar",
            "restartPolicy": "Always",
            "env": [{"name": "PODMORTEM_AGGREGATOR", "value": "podmortem-aggregator:50051"}],
        }
    ]
    pod["status"]["podIP"] = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
    return pod


async def held_pod(stub: Any, job: str, world: int, index: int, go_at: float) -> dict[str, Any]:
    """One sidecar: register (holds), then at its time the error file, the termination and `hold`; the
    wall times of the hold request and of its reply, and the reply."""
    from podmortem.core.model import ErrorRecord, Termination
    from podmortem.protocol.v1 import collector_pb2 as pb
    from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

    pod = f"{job}-{index}-abcde"
    root = index == 0
    reg = pb.Register(job=pb.JobRef(namespace=NS, name=job, kind="Job"), pod=pod, holds=True)
    reg.node, reg.world_size_hint, reg.rank = f"node-{index}", world, index
    text = "ValueError: label 7 out of range" if root else GLOO_PEER.format(ip="10.0.0.0")
    at = go_at if root else go_at + 1.0 + VICTIM_SPREAD * index / world
    record = ErrorRecord(message=text, exception_type=text.split(":")[0], timestamp=int(at))
    events = [
        make_event(error_to_pb(record), f"{pod}/e"),
        make_event(termination_to_pb(Termination(exit_code=1, reason="Error", finished_at=at + 0.2)), f"{pod}/t"),
    ]
    call = stub.Report(wait_for_ready=True)
    await call.write(pb.SidecarMessage(register=reg))
    registered = await call.read()
    out: dict[str, Any] = {"index": index, "root": root, "holds": registered.registered.holds}
    await asyncio.sleep(max(at - time.time(), 0.0))
    for event in events:
        await call.write(pb.SidecarMessage(event=event))
        await call.read()
    out["hold_at"] = time.time()
    await call.write(pb.SidecarMessage(hold=pb.Hold(seq=1, timeout_seconds=HOLD_TIMEOUT)))
    try:
        async with asyncio.timeout(HOLD_TIMEOUT):
            msg = await call.read()
        out["reply_at"] = time.time()
        reply = msg.hold_reply
        out["outcome"] = pb.HoldReply.Outcome.Name(reply.outcome)
        out["condition"], out["detail"] = reply.condition_type, reply.detail
    except TimeoutError:
        out["reply_at"], out["outcome"] = out["hold_at"] + HOLD_TIMEOUT, "TIMED_OUT"  # the sidecar exits then
    call.cancel()
    return out


async def _held_pods(target: str, job: str, world: int, indexes: list[int], go_at: float) -> list[dict[str, Any]]:
    import grpc.aio

    from bench.load import STREAMS_PER_CHANNEL as per_channel  # as the burst's load generators share them
    from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc

    channels = [grpc.aio.insecure_channel(target) for _ in range(0, len(indexes), per_channel)]
    stubs = [pb_grpc.CollectorStub(c) for c in channels]  # type: ignore[no-untyped-call]
    try:
        return list(
            await asyncio.gather(
                *(held_pod(stubs[n // per_channel], job, world, i, go_at) for n, i in enumerate(indexes))
            )
        )
    finally:
        for c in channels:
            await c.close()


def held_pods_process(target: str, job: str, world: int, indexes: list[int], go_at: float, out: Any) -> None:
    """A load-generator process: its pods' results, or a message if it failed."""
    try:
        out.put(asyncio.run(_held_pods(target, job, world, indexes, go_at)))
    except BaseException as exc:
        out.put(f"load generator failed: {exc!r}")
        raise


def thread_cpu_seconds(name: str) -> float:
    """CPU seconds of this process's thread called `name` (the emulator's)."""
    import os
    import threading

    tid = next(t.native_id for t in threading.enumerate() if t.name == name)
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_kind(method: str, path: str) -> str:
    """A request the emulator saw, by verb and resource: 'PATCH pods/status', 'WATCH pods', ..."""
    bare, _, query = path.partition("?")
    parts = [p for p in bare.split("/") if p]
    if "namespaces" in parts:
        parts = parts[parts.index("namespaces") + 2 :]
    elif parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    resource = parts[0] if parts else bare
    sub = f"/{parts[2]}" if len(parts) > 2 else ""
    verb = "WATCH" if "watch=true" in query else ("LIST" if method == "GET" and len(parts) == 1 else method)
    return f"{verb} {resource}{sub}"


async def api_job(
    world: int, processes: int, log_to: Path | None = None, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One W-pod indexed Job failing against the emulator with a real aggregator process; its figures."""
    import multiprocessing
    import signal
    import subprocess

    from support.kubelet_order import free_port

    from bench.common import cpu_seconds

    ctx = multiprocessing.get_context("spawn")
    with running_emulator() as api, tempfile.TemporaryDirectory(prefix="podmortem-holdapi-") as tmp:
        work = Path(tmp)
        name = f"big{world}"
        job = api.put(JOBS, indexed_job(name, world))
        for i in range(world):
            api.put(PODS, api_pod(job, i))
        port = free_port()
        cmd = [
            sys.executable, "-m", "podmortem.cli", "aggregator", "--kube", "--auth", "none",
            "--kubeconfig", str(api.kubeconfig(work / "kubeconfig", NS)), "--namespaces", NS,
            "--listen", f"127.0.0.1:{port}", "--metrics-listen", "", "--verdict-dir", str(work / "verdicts"),
            "--quorum-timeout", "120", "--ready-file", str(work / "ready"), *extra,
        ]  # fmt: skip
        with (work / "aggregator.log").open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            while not (work / "ready").exists() or not any("watch=true" in p for _, p in api.requests()):
                if proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"the aggregator did not start: {(work / 'aggregator.log').read_text()[-2000:]}")
                await asyncio.sleep(0.05)
            await asyncio.sleep(2.0)  # the pod watch places the listed pods
            go_at = time.time() + 5.0 + world / 1000  # every stream registered by then
            out = ctx.Queue()
            shares = [list(range(p, world, processes)) for p in range(processes)]
            gens = [
                ctx.Process(target=held_pods_process, args=(f"127.0.0.1:{port}", name, world, s, go_at, out))
                for s in shares
            ]
            for g in gens:
                g.start()
            await asyncio.sleep(max(go_at - time.time() - 0.5, 0))
            seen0 = len(api.requests())
            stamps: list[tuple[float, str]] = []  # when the emulator saw each request other than a condition's

            async def stamp() -> None:
                seen = api.emulator.seen
                done = seen0
                while True:
                    now, upto = time.time(), len(seen)
                    stamps.extend((now, request_kind(*seen[i])) for i in range(done, upto))
                    done = upto
                    await asyncio.sleep(0.05)

            stamper = asyncio.create_task(stamp())
            cpu0, emu0 = cpu_seconds(proc.pid), thread_cpu_seconds("kube-emulator")
            rows: list[dict[str, Any]] = []
            for _ in gens:
                got = await asyncio.to_thread(out.get, True, 120)
                if isinstance(got, str):
                    raise SystemExit(got)
                rows += got
            for g in gens:
                g.join(10)
            verdict_at = None
            while time.time() < go_at + 60:
                annotations = ((api.get(JOBS, NS, name) or {}).get("metadata") or {}).get("annotations") or {}
                if "podmortem.io/verdict" in annotations:
                    verdict_at = time.time()
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # Events and the job's condition after the annotation
            files = sorted((work / "verdicts").glob("*.json"), key=lambda f: f.stat().st_mtime)
            decided_at = files[0].stat().st_mtime if files else None  # the verdict file: written once decided
            stamper.cancel()
            if log_to is not None:
                log_to.write_bytes((work / "aggregator.log").read_bytes())
            cpu, emu = cpu_seconds(proc.pid) - cpu0, thread_cpu_seconds("kube-emulator") - emu0
            kinds = Counter(request_kind(m, p) for m, p in api.requests()[seen0:])
            on_pods = Counter((our_condition(p) or {}).get("type", "none") for p in api.list(PODS, NS))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        return {
            "world": world,
            "rows": rows,
            "verdict_after_root_s": None if verdict_at is None else verdict_at - go_at,
            "decided_after_root_s": None if decided_at is None else decided_at - go_at,
            "publisher_requests_after_root_s": [
                (round(t - go_at, 2), kind) for t, kind in stamps if kind != "PATCH pods/status"
            ],
            "last_victim_hold_after_root_s": max(r["hold_at"] for r in rows) - go_at,
            "aggregator_cpu_s": cpu,
            "emulator_cpu_s": emu,
            "requests": dict(sorted(kinds.items())),
            "conditions_on_pods": dict(on_pods),
        }


def print_api(result: dict[str, Any]) -> bool:
    """The figures of one `api_job`; True when every pod got the condition it should, within its hold."""
    rows: list[dict[str, Any]] = result["rows"]
    world: int = result["world"]
    print(f"api W={world}: a {world}-pod indexed Job, user_code root, victims 1-2 s later; hold timeout 15 s")
    for role in ("root", "victim"):
        mine = [r for r in rows if r["root"] == (role == "root")]
        extra = [r["reply_at"] - r["hold_at"] for r in mine]
        outcomes = dict(Counter(r["outcome"] + (f" {r['condition']}" if r.get("condition") else "") for r in mine))
        print(f"  {role:6}  extra non-terminal seconds  {quantiles(extra)}")
        print(f"  {role:6}  outcomes                    {outcomes}")
    decided, sent = result["decided_after_root_s"], result["publisher_requests_after_root_s"]
    print(f"  verdict decided (its file)     {'never' if decided is None else f'{decided:.2f} s'} after the root's end")
    if sent:
        first, last, kinds = sent[0][0], sent[-1][0], dict(Counter(kind for _, kind in sent))
        print(f"  the verdict's requests         {first:.2f}-{last:.2f} s after the root's end at the API: {kinds}")
    back = result["verdict_after_root_s"]
    back_s = "never" if back is None else f"{back:.2f} s"
    print(f"  annotation read back           {back_s} (the bench's read waits in the emulator's own loop)")
    print(f"  last victim's hold             {result['last_victim_hold_after_root_s']:.2f} s after the root's end")
    print(f"  aggregator CPU {result['aggregator_cpu_s']:.2f} s, emulator CPU {result['emulator_cpu_s']:.2f} s")
    print(f"  API requests in the incident   {sum(result['requests'].values())}: {result['requests']}")
    print(f"  conditions on the pods         {result['conditions_on_pods']}")
    written = sum(1 for r in rows if r["outcome"] == "WRITTEN")
    return written == world


async def main_async(args: argparse.Namespace) -> int:
    if args.api:
        right = True
        for w in (int(x) for x in args.api.split(",")):
            budget = (
                ("--condition-qps", args.condition_qps, "--condition-burst", args.condition_qps)
                if args.condition_qps
                else ()
            )
            result = await api_job(w, args.processes, Path(f"{args.log}.{w}") if args.log else None, budget)
            if args.json:
                print(json.dumps(result, indent=2))
            right = print_api(result) and right
        return 0 if right else 1
    if args.desk:
        failures = 0
        for w in (int(x) for x in args.desk.split(",")):
            took, cpu, marked = await desk_only(w)
            failures += marked != w - 1
            print(f"desk W={w}: every hold answered in {took:.2f} s, CPU {cpu:.2f} s, victims {marked}/{w - 1}")
        return 1 if failures else 0
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for hold in (True, False):
            rows += await one_round(r * 2 + int(not hold), args.pods, hold)
    if args.json:
        print(json.dumps(rows, indent=2))
    print(f"hold cost: {args.rounds} round(s) of a {args.pods}-pod indexed Job, user_code root, victims 1 s later")
    for role in ("root", "victim"):
        held = [x["held_s"] for x in rows if x["role"] == role and x["hold"] and x["held_s"] is not None]
        with_hold = [x["sigterm_to_exit_s"] for x in rows if x["role"] == role and x["hold"]]
        without = [x["sigterm_to_exit_s"] for x in rows if x["role"] == role and not x["hold"]]
        extra = [a - b for a, b in zip(sorted(with_hold), sorted(without), strict=False)]
        print(f"  {role:6}  held (sidecar's wait)       {quantiles(held)}")
        print(f"  {role:6}  SIGTERM -> exit, with hold  {quantiles(with_hold)}")
        print(f"  {role:6}  SIGTERM -> exit, no hold    {quantiles(without)}")
        print(f"  {role:6}  extra non-terminal seconds  {quantiles(extra)}")
    wrong = [x for x in rows if not x["right"]]
    print(f"conditions right: {len(rows) - len(wrong)}/{len(rows)}")
    for x in wrong:
        print(f"  WRONG: {x}")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--api", default="", help="comma-separated W: a W-pod job against the API emulator")
    parser.add_argument("--condition-qps", default="", help="--api: the aggregator's --condition-qps and -burst")
    parser.add_argument("--log", default="", help="--api: keep the aggregator's log as LOG.W")
    parser.add_argument("--processes", type=int, default=2, help="--api: load-generator processes")
    parser.add_argument("--desk", default="", help="comma-separated W: the hold desk alone, in process")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
