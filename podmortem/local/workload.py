"""A tiny distributed training program that fails for real, on purpose, where and how we say.

podmortem's demo and end-to-end tests need jobs whose failures are produced by torch itself — real
TorchElastic error files, real gloo "Connection closed by peer" / "Timed out waiting" secondaries,
real signals — not hand-written fixtures. This module is that training program. torchrun runs it
once per worker::

    python -m torch.distributed.run --nnodes 2 --node-rank 0 --nproc-per-node 1 ... \\
        -m podmortem.local.workload --fault exception --fail-rank 1 --fail-step 5

It builds a gloo process group with a short timeout, trains a small linear model and all-reduces the
gradients every step. On rank `--fail-rank` at step `--fail-step` it first writes a marker file
(`<fault-dir>/rank-<R>.json` holding `time.time()` of the writing process, so the harness can measure
fault-to-verdict time) and then injects the fault:

==========  ==================================================================================
exception   `ValueError` raised from the training step (category user_code)
oom         the real `torch.OutOfMemoryError("CUDA out of memory. Tried to allocate ...")`
sigkill     host OOM-killer stand-in: SIGKILL to this pod's torchrun agent and to itself (the
            kernel kills every process of a container whose memory cgroup is OOM-killed); the
            harness reports the container as OOMKilled, exit 137
segfault    a real SIGSEGV (`ctypes.string_at(0)`)
hang        blocks forever in `load_batch` (the data step) while the peers hit the collective timeout
dataloader  its DataLoader worker (a process of its own) blocks forever fetching a sample; the rank waits
            for it in `load_batch` while the peers hit the collective timeout
desync      skips one gradient all_reduce and goes on to the step's metrics all_reduce (another process
            group): each side waits in a collective the other never enters (category user_code)
preempt     nothing in-process: the marker tells the harness to preempt this pod (SIGTERM to the
            agent plus a DisruptionTarget condition); training goes on until the signal lands
multi       `ValueError` on the fail rank, and independently `KeyError` on `--second-rank`
            about `--second-delay` seconds later (that rank is busy in local work, not in a
            collective, so its error is its own and not a secondary one)
skew        `ValueError` like `exception`; the harness runs the other pods under the clock shim
            (podmortem.local.clockshim) so their wall clocks — and error-file timestamps — run behind;
            with `--second-rank`, that rank also fails on its own later, like `multi`, but its
            timestamp reads earlier than the root's
==========  ==================================================================================

The workload cooperates with podmortem's hang capture: it registers faulthandler for SIGTERM (every
thread's stack goes to stderr when torchrun tears a worker down), records its collectives in torch's
Flight Recorder (`TORCH_FR_BUFFER_SIZE`, unless set), and with `PODMORTEM_CAPTURE_DIR` set serves torch's
worker control plane (`worker_main()`) on `$PODMORTEM_CAPTURE_DIR/worker-<RANK>.sock`
(`TORCH_WORKER_SERVER_SOCKET`, unless set), where the sidecar asks for stacks and Flight Recorder state.
With `PODMORTEM_WORKLOAD_COOPERATE=0` it does none of this: a script that does not cooperate (the local
harness then runs the other capture paths, py-spy or the injected sitecustomize, or none).

The collectives run on a gloo device bound to the pod's own address (`--pod-ip`, any 127.0.0.0/8
address works on loopback), so gloo messages name the pod IPs the way they do in a real cluster.

torch is imported only inside `main()`: `FAULTS` and the argument parser can be used by the harness on
a machine without torch (see `run_fallback`, which imitates the same job without torch).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from podmortem import settings
from podmortem.local import faults
from podmortem.settings import Setting

FAULTS: tuple[str, ...] = ("none", *faults.FAULTS)

OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
    "1.06 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of the "
    "allocated memory 74.31 GiB is allocated by PyTorch, and 2.61 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


SETTINGS: tuple[Setting, ...] = (
    Setting("fault", "--fault", "PODMORTEM_FAULT", "what goes wrong", default="none", choices=FAULTS),
    Setting("fail_rank", "--fail-rank", "PODMORTEM_FAIL_RANK", "the global rank made to fail", default="0"),
    Setting("fail_step", "--fail-step", "PODMORTEM_FAIL_STEP", "the step it fails at", default="5"),
    Setting("second_rank", "--second-rank", "PODMORTEM_SECOND_RANK", "multi: the rank with the second error"),
    Setting("second_delay", "--second-delay", "PODMORTEM_SECOND_DELAY", "multi: seconds between errors", default="1"),
    Setting("steps", "--steps", "PODMORTEM_STEPS", "steps before a clean exit", default="100000"),
    Setting("step_time", "--step-time", "PODMORTEM_STEP_TIME", "seconds of 'compute' per step", default="0.05"),
    Setting("pg_timeout", "--pg-timeout", "PODMORTEM_PG_TIMEOUT", "collective timeout in seconds", default="6"),
    Setting("fault_dir", "--fault-dir", "PODMORTEM_FAULT_DIR", "where the fault marker is written", default=""),
    Setting("pod_ip", "--pod-ip", "POD_IP", "address the gloo device binds", default=""),
)
_TYPES: dict[str, Callable[[str], Any]] = {
    "fail_rank": int,
    "fail_step": int,
    "second_rank": int,
    "second_delay": float,
    "steps": int,
    "step_time": float,
    "pg_timeout": float,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="podmortem.local.workload", description=__doc__.split("\n")[0])
    settings.add_arguments(p, SETTINGS, "workload settings")
    return p


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The workload's settings: flag > environment > default, typed."""
    p = parser()
    raw = settings.read(SETTINGS, None, p.parse_args(argv))
    values: dict[str, Any] = {s.dest: None for s in SETTINGS}
    for s in SETTINGS:
        text = raw.get(s.dest)
        if text is None or (text == "" and s.dest in _TYPES):
            continue
        try:
            values[s.dest] = _TYPES.get(s.dest, str)(text)
        except ValueError:
            p.error(f"{s.name} = {text!r} is not a number")
    if values["fault"] not in FAULTS:
        p.error(f"{SETTINGS[0].name} = {values['fault']!r} is not one of {', '.join(FAULTS)}")
    return argparse.Namespace(**values)


def local_world_size() -> int:
    return int(settings.platform("LOCAL_WORLD_SIZE") or "1")


def write_marker(fault_dir: str, rank: int, fault: str, step: int) -> None:
    """Record the moment of the fault (this process's wall clock) right before injecting it."""
    if not fault_dir:
        return
    d = Path(fault_dir)
    d.mkdir(parents=True, exist_ok=True)
    data = {
        "time": time.time(),
        "monotonic": time.monotonic(),
        "fault": fault,
        "rank": rank,
        "step": step,
        "pid": os.getpid(),
    }
    tmp = d / f".rank-{rank}.json.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, d / f"rank-{rank}.json")


def await_marker(fault_dir: str, rank: int, limit: float = 60.0) -> None:
    """Wait until `rank` has recorded its fault (its marker file exists), at most `limit` seconds.

    The second error of `multi`/`skew` must come *after* the first by its stated delay. Counting the
    delay from a collective both ranks left together is not enough on a loaded 2-core machine: the root
    rank can be descheduled for longer than the delay between that collective and its fault, and then the
    "second" error is in fact the first (seen as a flaky e2e test). Counting from the root's own marker
    keeps the premise true under any load; the second error still does not depend on the first.
    """
    if not fault_dir:
        return
    marker = Path(fault_dir) / f"rank-{rank}.json"
    deadline = time.monotonic() + limit
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def log(rank: int, text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    print(f"{stamp} [rank{rank}] {text}", flush=True)


def _parent_is_torchrun() -> bool:
    """Is our parent a torchrun agent (`python -m torch.distributed.run ...` or `torchrun ...`)?"""
    try:
        argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if len(argv) > 2 and argv[1] == b"-m" and argv[2] in (b"torch.distributed.run", b"torch.distributed.launch"):
        return True
    return any(Path(a.decode(errors="replace")).name == "torchrun" for a in argv[:2])


def inject(fault: str, rank: int, step: int, kill_agent: bool = False) -> None:
    """Make this process fail the way `fault` says. Returns only for `preempt` (the harness acts).

    `kill_agent`: for `sigkill`, also SIGKILL our parent, the torchrun agent (never anything else).
    """
    if fault in ("exception", "skew", "multi"):
        raise ValueError(f"learning rate must be positive, got -0.0031 at step {step}")
    if fault == "oom":
        import torch

        raise torch.OutOfMemoryError(OOM_MESSAGE)
    if fault == "sigkill":
        # The container's memory cgroup is OOM-killed as a whole (memory.oom.group): the agent goes
        # down with the worker. The agent is our parent (torchrun starts workers directly).
        log(rank, "allocating host memory ...")
        if kill_agent and _parent_is_torchrun():
            with contextlib.suppress(ProcessLookupError):
                os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "segfault":
        log(rank, "calling into native code ...")
        ctypes.string_at(0)  # SIGSEGV: reading address 0
    # hang: load_batch blocks (the training loop calls it); desync: the loop skips a collective; preempt: the harness.


def load_batch(step: int, rank: int, stuck: bool) -> tuple[Any, Any]:
    """The step's batch. With `stuck`, it never arrives: the worker waits here, outside any collective, while its
    peers wait for it in the next all_reduce (the `hang` fault)."""
    if stuck:
        log(rank, "waiting for a batch that never arrives ...")
        threading.Event().wait()
    import torch

    return torch.randn(8, 16), torch.randn(8, 4)


class _StuckSamples:
    """A dataset whose samples never come: `__getitem__` blocks (in the DataLoader's worker process)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> Any:
        threading.Event().wait()


def load_batch_from_workers(rank: int) -> tuple[Any, Any]:
    """The step's batch from a DataLoader with one worker process, which blocks fetching it (the
    `dataloader` fault): this rank waits for its worker here, outside any collective."""
    import torch.utils.data

    log(rank, "waiting for a DataLoader worker that never delivers ...")
    loader: Any = torch.utils.data.DataLoader(_StuckSamples(), batch_size=8, num_workers=1)  # type: ignore[arg-type]
    batch = next(iter(loader))
    return batch, batch


def _gloo_group_on(address: str, rank: int, world: int, timeout: timedelta) -> Any:
    """A second gloo group whose device binds `address`, so gloo messages name the pod IPs.

    The default group binds whatever the hostname resolves to (127.0.0.1 here for every "pod").
    `ProcessGroupGloo._Options` and `.allreduce` are public in practice but absent from torch's stubs.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    c10d: Any = dist
    store = c10d.PrefixStore("podmortem-pod-ip/", distributed_c10d._get_default_store())
    opts = c10d.ProcessGroupGloo._Options()
    opts._timeout = timeout
    opts._devices = [c10d.ProcessGroupGloo.create_device(hostname=address)]
    return c10d.ProcessGroupGloo(store, rank, world, opts)


def same_pod(rank: int, other: int) -> bool:
    """Are both global ranks workers of this torchrun agent (this pod)?"""
    local = local_world_size()
    return rank // local == other // local


def train(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=args.pg_timeout)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    collective: Callable[[torch.Tensor], None]
    if args.pod_ip:
        pg = _gloo_group_on(args.pod_ip, rank, world, timeout)

        def collective(t: torch.Tensor) -> None:
            pg.allreduce([t]).wait()
    else:

        def collective(t: torch.Tensor) -> None:
            dist.all_reduce(t)

    # The step's metrics are summed over ranks in a group of their own (as a logger's group would be).
    metrics_group = dist.new_group(backend="gloo", timeout=timeout)
    torch.manual_seed(rank)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    log(rank, f"training: world size {world}, fault {args.fault} on rank {args.fail_rank} at step {args.fail_step}")
    for step in range(args.steps):
        failing = step == args.fail_step and rank == args.fail_rank and args.fault != "none"
        if failing and args.fault in ("hang", "dataloader", "desync"):
            write_marker(args.fault_dir, rank, args.fault, step)
        if failing and args.fault == "dataloader":
            x, y = load_batch_from_workers(rank)
        x, y = load_batch(step, rank, stuck=failing and args.fault == "hang")
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        if step == args.fail_step:
            if failing and args.fault not in ("hang", "dataloader", "desync"):
                write_marker(args.fault_dir, rank, args.fault, step)
                inject(args.fault, rank, step, kill_agent=True)
            elif args.fault in ("multi", "skew") and args.second_rank is not None and same_pod(rank, args.second_rank):
                # The second pod stalls in local work (a slow data-loading step) and then fails on its own:
                # its error is not a consequence of the first one. Its other ranks stall a little longer,
                # so that the pod's first failure — the one its agent reports — is the second error.
                await_marker(args.fault_dir, args.fail_rank)
                if rank != args.second_rank:
                    time.sleep(args.second_delay + 1.0)
                else:
                    time.sleep(args.second_delay)
                    write_marker(args.fault_dir, rank, "multi-second", step)
                    raise KeyError(f"'labels' missing from batch at step {step}")
        for i, p in enumerate(model.parameters()):
            assert p.grad is not None
            if failing and args.fault == "desync" and i == 1:
                log(rank, "skipping the bias gradient's all_reduce ...")
                continue
            collective(p.grad)
            p.grad /= world
        dist.all_reduce(loss.detach(), group=metrics_group)
        opt.step()
        if step % 10 == 0:
            log(rank, f"step {step} loss {loss.item():.4f}")
        time.sleep(args.step_time)
    log(rank, "done")
    dist.destroy_process_group()
    return 0


def cooperate(rank: str) -> None:
    """Set up what podmortem's hang capture reads (see the module docstring); before torch starts recording."""
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    capture_dir = settings.platform("PODMORTEM_CAPTURE_DIR")
    if capture_dir:
        os.environ.setdefault("TORCH_WORKER_SERVER_SOCKET", str(Path(capture_dir) / f"worker-{rank}.sock"))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    cooperating = settings.platform("PODMORTEM_WORKLOAD_COOPERATE") != "0"
    if cooperating:
        cooperate(settings.platform("RANK") or "0")
    from torch.distributed.elastic.multiprocessing.errors import record

    with contextlib.ExitStack() as stack:
        if cooperating and settings.platform("TORCH_WORKER_SERVER_SOCKET"):
            stack.enter_context(_control_plane())
        # worker_main's own `record` covers only the call that makes its context manager: the error file of an
        # exception in training comes from this one.
        return record(train)(args) or 0
    return 0


@contextlib.contextmanager
def _control_plane() -> Iterator[None]:
    """torch's worker control plane (`worker_main`), or a line in the log when it cannot start (a socket path
    longer than a unix socket takes, a directory that is gone): training runs either way."""
    from torch.distributed.elastic.control_plane import worker_main

    try:
        server: Any = worker_main()  # `record` leaves its type to Any
        server.__enter__()
    except Exception as exc:  # the control plane is help for podmortem, never a reason to fail training
        print(f"podmortem workload: no worker control plane: {type(exc).__name__}: {exc}", file=sys.stderr)
        yield
        return
    try:
        yield
    finally:
        server.__exit__(None, None, None)


# --- without torch ------------------------------------------------------------------------------

GLOO_CLOSED = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[{ip}]:{port}. This is typically caused by a remote worker crashing. Check the logs of the remote "
    "worker before reporting an error. GLHF! \U0001f3d6\ufe0f"
)
GLOO_MISMATCH = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 44 vs 4. Received data "
    "size doesn't match expected size. Is there a distributed collective mismatch in your code?"
)
GLOO_TIMEOUT = (
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
    "{ms}ms for recv operation to complete"
)


def _write_error_file(message: str, callstack: str) -> None:
    """Write TORCHELASTIC_ERROR_FILE byte for byte the way torch's `record` does."""
    path = settings.platform("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {"message": message, "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time()))}}
    }
    with open(path, "w") as fp:
        json.dump(data, fp)


def run_fallback(argv: Sequence[str] | None = None) -> int:
    """One "pod" of the same job without torch: one process per pod, the peers watched through files.

    Used by the harness only when torch is not importable. It keeps the failure *contract* of the real
    job — the failing pod writes an error file in torch's format (or dies by a signal and writes none),
    the peers fail with gloo's exact messages once the failing pod is gone ("Connection closed by
    peer") or stalled ("Timed out waiting"), and SIGTERM makes a pod write torchrun's own
    `SignalException: Process N got signal: 15` and exit 1 — but the messages are imitations, not
    torch's output. Heartbeats live in `<fault-dir>/hb/rank-<R>` (pid and step).
    """
    args = parse(argv)
    rank = int(settings.platform("RANK") or "0")
    world = int(settings.platform("WORLD_SIZE") or "1")
    hb = Path(args.fault_dir or ".") / "hb"
    hb.mkdir(parents=True, exist_ok=True)

    def on_sigterm(signum: int, _frame: object) -> None:
        _write_error_file(
            f"SignalException: Process {os.getpid()} got signal: {signum}", "".join(traceback.format_stack())
        )
        os._exit(1)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return _fallback_loop(args, rank, world, hb)
    except Exception as exc:
        _write_error_file(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        print(traceback.format_exc(), file=sys.stderr, flush=True)
        return 1


def _fallback_loop(args: argparse.Namespace, rank: int, world: int, hb: Path) -> int:
    def beat(step: int) -> None:
        tmp = hb / f".rank-{rank}.tmp"
        tmp.write_text(json.dumps({"pid": os.getpid(), "step": step, "ip": args.pod_ip or "127.0.0.1"}))
        os.replace(tmp, hb / f"rank-{rank}")

    def peers() -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for r in range(world):
            with contextlib.suppress(OSError, ValueError):
                out[r] = json.loads((hb / f"rank-{r}").read_text())
        return out

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    log(rank, f"training (no torch): world size {world}, fault {args.fault} on rank {args.fail_rank}")
    for step in range(args.steps):
        beat(step)
        if step == args.fail_step:
            if rank == args.fail_rank and args.fault != "none":
                write_marker(args.fault_dir, rank, args.fault, step)
                if args.fault == "oom":
                    raise OutOfMemoryError(OOM_MESSAGE)
                if args.fault in ("hang", "dataloader"):
                    load_batch(step, rank, stuck=True)
                if args.fault == "desync":  # what gloo says when a peer's collective does not match (an imitation)
                    raise RuntimeError(GLOO_MISMATCH)
                inject(args.fault, rank, step)
            elif args.fault == "multi" and rank == args.second_rank:
                await_marker(args.fault_dir, args.fail_rank)
                time.sleep(args.second_delay)
                write_marker(args.fault_dir, rank, "multi-second", step)
                raise KeyError(f"'labels' missing from batch at step {step}")
        # The "collective": wait until every peer reached this step.
        deadline = time.monotonic() + args.pg_timeout
        while True:
            state = peers()
            for r, s in state.items():
                if r != rank and not alive(int(s["pid"])):
                    raise RuntimeError(GLOO_CLOSED.format(ip=s.get("ip", "127.0.0.1"), port=40000 + r))
            if len(state) == world and all(int(s["step"]) >= step for s in state.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(GLOO_TIMEOUT.format(ms=int(args.pg_timeout * 1000)))
            time.sleep(0.02)
        time.sleep(args.step_time)
    return 0


class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError (same name, so the error file reads the same) without torch."""


if __name__ == "__main__":
    if settings.platform("PODMORTEM_WORKLOAD_FALLBACK") == "1":
        sys.exit(run_fallback())
    sys.exit(main())
