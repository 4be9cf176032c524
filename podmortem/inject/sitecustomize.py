"""podmortem's start-up hook for training processes (opt-in): evidence of a hang, without changing the script.

This file is injected: when a pod opts in, podmortem's webhook puts it first on the training container's
`PYTHONPATH`, so every Python process of that container imports it at start-up, as the `site` module imports
any `sitecustomize` (the way APM agents such as OpenTelemetry's and Datadog's auto-instrumentation work). It
runs before the training script, once per process. In a torchrun worker (a process whose environment has
`LOCAL_RANK`), and only there, it:

1. registers `faulthandler` for SIGTERM (`all_threads=True, chain=True`): when torchrun's agent tears the
   workers down after a collective timeout, each prints every thread's Python stack to stderr, then dies
   as it would have (the previous handler runs: `chain`). The stuck rank's stack shows where it stopped;
   podmortem reads it from the log tail. A handler the script installs for SIGTERM later replaces it.
   (torch's `record` and `worker_main` enable faulthandler for fatal signals only, not for SIGTERM.)
2. sets `TORCH_WORKER_SERVER_SOCKET` to `$PODMORTEM_CAPTURE_DIR/worker-<RANK>.sock` when it is unset, so a
   script that runs under `torch.distributed.elastic.control_plane.worker_main()` serves its stack and
   Flight Recorder to the sidecar. (A script without `worker_main()` serves nothing; nothing else changes.)
3. sets `TORCH_FR_BUFFER_SIZE` (torch's Flight Recorder ring, in entries) to 2000 when neither it nor its
   old name `TORCH_NCCL_TRACE_BUFFER_SIZE` is set, so that there is a record to dump.

It then imports the `sitecustomize` it shadows, if the image has one (Debian's Python has one), so that
one still runs. It never breaks the program: any error leaves it silently doing nothing, and it imports
nothing but the standard library. Set `PODMORTEM_HOOK=0` in the container to turn it off.
"""


def _install() -> None:
    import os

    env = os.environ
    if env.get("PODMORTEM_HOOK", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    if "LOCAL_RANK" not in env:
        return  # not a torchrun worker (the agent itself, a tool, a shell's python)
    import faulthandler
    import signal

    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    capture = env.get("PODMORTEM_CAPTURE_DIR", "")
    rank = env.get("RANK", "")
    if capture and rank.isdigit() and not env.get("TORCH_WORKER_SERVER_SOCKET"):
        env["TORCH_WORKER_SERVER_SOCKET"] = os.path.join(capture, f"worker-{rank}.sock")
    if not env.get("TORCH_FR_BUFFER_SIZE") and not env.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
        env["TORCH_FR_BUFFER_SIZE"] = "2000"


def _chain() -> None:
    """Import the next `sitecustomize` on sys.path (the one this file shadows), if there is one; its own
    errors are reported as the `site` module reports them, and the program goes on."""
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        del sys.modules["sitecustomize"]
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")
    except Exception as exc:
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")
    finally:
        sys.path[:] = saved
        if ours is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = ours


try:
    _install()
except Exception:  # never break the user's program
    pass
if __name__ == "sitecustomize":  # imported as the start-up hook (not as podmortem.inject.sitecustomize)
    try:
        _chain()
    except Exception:
        pass
