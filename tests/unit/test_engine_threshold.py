"""The words a rule reads at the PermanentFailure threshold (0.9) belong to its family alone: words that a healthy run,
a client that retries, a notice of a risk or a status table also print are narrowed to the family's own sentence, or
read below 0.9 (docs/engine.md, "Which verdicts may reach 0.9"). The texts are written for these tests in the formats
the tools print; each pod is read the way a pod watch sees it (the log tail and the exit code, no error file)."""

from __future__ import annotations

import pytest
from support.members import member

from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.model import Incident, JobRef

PERMANENT = 0.9
TORN_DOWN = "W1127 06:40:02.118000 41 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal"


def _alone(log: str) -> tuple[str | None, str]:
    f = assess(member("w-0", 0, log))
    return f.category, f.rule.id if f.rule is not None else ""


def _decided(log: str) -> tuple[str | None, float]:
    v = decide(Incident(JobRef("ml", "llm"), 2, (member("w-0", 0, log), member("w-1", 1, TORN_DOWN, exit_code=143))))
    return v.category, v.confidence


def _raised(line: str) -> str:
    return f'Traceback (most recent call last):\n  File "/app/train.py", line 88, in <module>\n{line}\n'


# --- a healthy run's own lines are not its failure -------------------------------------------------------------------

# Lightning's SLURM environment says at start-up, in every run, that it will requeue on the scheduler's signal.
LIGHTNING_START = "SLURM auto-requeueing enabled. Setting signal handlers."
# An HTTP client warning that a request failed and will be retried: huggingface_hub falls back to its cache when the
# hub is unreachable, pip and urllib3 retry; the run goes on.
HUB_RETRY = (
    "WARNING:huggingface_hub.utils._http:'(MaxRetryError(\"HTTPSConnectionPool(host='hub.example', port=443): Max "
    "retries exceeded with url: /m/resolve/main/config.json (Caused by NewConnectionError('<urllib3.connection."
    "HTTPSConnection object at 0x7f01>: Failed to establish a new connection: [Errno 101] Network is unreachable'))\"),"
    " '(Request ID: 5e1c)')' thrown while requesting HEAD https://hub.example/m/resolve/main/config.json\n"
    "Retrying in 1s [Retry 1/5]."
)
HUB_RETRY_DNS = (
    "WARNING:huggingface_hub.utils._http:'(MaxRetryError(\"HTTPSConnectionPool(host='hub.example', port=443): Max "
    'retries exceeded with url: /m/resolve/main/tokenizer.json (Caused by NameResolutionError("<urllib3.connection.'
    "HTTPSConnection object at 0x7f02>: Failed to resolve 'hub.example' ([Errno -3] Temporary failure in name "
    "resolution)\"))\"), '(Request ID: 77aa)')' thrown while requesting HEAD https://hub.example/m/resolve/main/x.json"
)
URLLIB3_RETRY = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken "
    "by 'ReadTimeoutError(\"HTTPSConnectionPool(host='pkgs.example', port=443): Read timed out. (read timeout=15)\")': "
    "/simple/tokenizers/"
)
# Ray at start-up when the pod's /dev/shm is small: it puts its object store in /tmp, and the run goes on.
RAY_OBJECT_STORE = (
    "2026-11-27 06:20:11,402\tWARNING services.py:2070 -- WARNING: The object store is using /tmp instead of /dev/shm "
    "because /dev/shm has only 67108864 bytes available. This will harm performance!"
)
# Libraries probed at start-up, and missing on purpose: NCCL's network plugin (NCCL_DEBUG=INFO), TensorFlow's CUDA
# runtime on a CPU-only node.
NCCL_PLUGIN_PROBE = (
    "w-0:88:88 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared "
    "object file: No such file or directory\nw-0:88:88 [0] NCCL INFO NET/Plugin : No plugin found, using internal "
    "implementation"
)
TF_DLOPEN = (
    "2026-11-27 06:20:12.551 W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load dynamic "
    "library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open shared object file: No such file or directory"
)
# The NIC telling NCCL of an event that is no failure: the RoCE GID table changed (an address added to the interface).
IB_GID_CHANGE = "w-0:88:120 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_2:1 Got async event : GID table change"
# A node's conditions as `kubectl describe node` lists them on a healthy node.
NODE_CONDITIONS = (
    "Conditions:\n  Type             Status  Reason                       Message\n"
    "  MemoryPressure   False   KubeletHasSufficientMemory   kubelet has sufficient memory available\n"
    "  DiskPressure     False   KubeletHasNoDiskPressure     kubelet has no disk pressure\n"
    "  PIDPressure      False   KubeletHasSufficientPID      kubelet has sufficient PID available\n"
    "  Ready            True    KubeletReady                 kubelet is posting ready status"
)

# Kubernetes' warnings of an operation it retries, as `kubectl describe pod` lists them for a pod that then ran: the
# projected token volume's mount failing once, a pod waiting for a GPU node, an image pulled on the second try.
KUBE_EVENTS = (
    "Events:\n  Type     Reason            Age   From               Message\n"
    "  Warning  FailedScheduling  12m   default-scheduler  0/6 nodes are available: 6 Insufficient nvidia.com/gpu.\n"
    "  Normal   Scheduled         9m    default-scheduler  Successfully assigned ml/w-0 to gpu-3\n"
    '  Warning  FailedMount       9m    kubelet            MountVolume.SetUp failed for volume "kube-api-access-7x" : '
    'object "ml"/"kube-root-ca.crt" not registered\n'
    '  Warning  Failed            9m    kubelet            Failed to pull image "reg.example/train:4": i/o timeout\n'
    "  Normal   Started           8m    kubelet            Started container trainer"
)


@pytest.mark.parametrize(
    "healthy",
    [
        LIGHTNING_START,
        HUB_RETRY,
        HUB_RETRY_DNS,
        URLLIB3_RETRY,
        RAY_OBJECT_STORE,
        NODE_CONDITIONS,
        KUBE_EVENTS,
        NCCL_PLUGIN_PROBE,
        TF_DLOPEN,
        IB_GID_CHANGE,
    ],
)
def test_a_healthy_run_s_own_lines_do_not_outrank_the_program_s_error(healthy: str) -> None:
    log = f"{healthy}\nepoch 3 step 120 loss 1.93\n" + _raised("KeyError: 'labels'")
    assert _alone(log) == ("user_code", "python.exception")


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # the failures those words stand for, in their own sentences
        ("Epoch 7: Handling auto-requeue signal: 10", "preemption"),
        ("  MemoryPressure   True    KubeletHasInsufficientMemory   kubelet has insufficient memory", "host_oom"),
        ("Status: Failed\nReason: Evicted\nMessage: The node had condition: [DiskPressure].", "infra"),
        ("misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-Qx1 to 9637892 bytes", "infra"),
        ("w-0:88:120 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_2:1 Got async event : port error", "network"),
        (
            _raised(
                "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='hub.example', port=443): Max retries "
                "exceeded with url: /m/config.json (Caused by NewConnectionError('Failed to establish a new "
                "connection: [Errno 101] Network is unreachable'))"
            ),
            "infra",
        ),
        ("[rank2]: RuntimeError: connect() to trainer-0:29500 failed: [Errno 113] No route to host", "network"),
    ],
)
def test_the_family_s_own_sentence_still_reads_as_its_family(text: str, category: str) -> None:
    assert _alone(text)[0] == category


# --- words that mean the family but that no corpus line or public text confirms stay below 0.9 ----------------------


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # a notice of a risk, a poller's URL, an operator's drain: the node may well go on
        ("spot-watch: rebalance recommendation received for this instance", "preemption"),
        ("imds: GET http://169.254.169.254/latest/meta-data/spot/instance-action", "preemption"),
        ("gce-agent: host maintenance event scheduled", "preemption"),
        ("ops: draining the node for an upgrade", "preemption"),
        # a lost node in plain words
        ("scheduler: lost contact with the node gpu-7", "node_lost"),
        ("controller: gpu-7: node was removed from the pool", "node_lost"),
        ("node gpu-7 heartbeat timed out after 90s; removing it from the cluster", "node_lost"),
        # Kubernetes deleting the pod from outside: its node object gone (a failed or a reclaimed machine), a NoExecute
        # taint on its node (unreachable, or an operator's own)
        ("  conditions:\n  - message: 'PodGC: node no longer exists'\n    reason: DeletionByPodGC", "node_lost"),
        ("status:\n  conditions:\n  - reason: DeletionByTaintManager\n    type: DisruptionTarget", "node_lost"),
        ('"message": "Taint manager: deleting due to NoExecute taint", "type": "DisruptionTarget"', "node_lost"),
        # a managed training service stopping the job at its own run-time limit
        ("2026-11-27 06:40:05 MaxRuntimeExceeded - Training job stopped at its maximum run time", "preemption"),
    ],
)
def test_plain_words_without_evidence_keep_their_family_below_the_threshold(text: str, category: str) -> None:
    got, confidence = _decided(text)
    assert got == category
    assert confidence < PERMANENT


def test_a_device_s_taint_is_not_its_node_s() -> None:
    """The device taint manager (DRA) deletes a pod for a taint on a device it uses, not on its node."""
    assert _decided('  message: "Device Taint manager: deleting due to NoExecute taint"')[0] != "node_lost"


@pytest.mark.parametrize(
    "text",
    [
        "slurmstepd: error: Exceeded job memory limit",
        "slurmstepd: error: Job 40117 exceeded memory limit (41943040 > 40960000), being killed\n"
        "slurmstepd: error: Exceeded job memory limit\n"
        "slurmstepd: error: *** JOB 40117 ON gpu-node-3 CANCELLED AT 2026-11-27T06:40:00 ***",
    ],
)
def test_slurm_killing_the_job_over_its_memory_limit_is_host_memory_at_the_threshold(text: str) -> None:
    assert _decided(text) == ("host_oom", PERMANENT)


def test_slurm_s_note_that_a_memory_limit_was_reached_at_some_point_is_no_kill() -> None:
    """The step's end-of-run note: the cgroup's limit was reached once, which reclaiming page cache does too. No rule
    reads it as a kill (its words may still make a guess of the category, below the threshold)."""
    note = "slurmstepd: error: Exceeded step memory limit at some point."
    assert _alone(note)[1] != "log.host-oom"
    assert _decided(note)[1] < PERMANENT


def test_a_path_the_program_names_wrong_and_a_missing_mount_read_the_same_so_stay_below_the_threshold() -> None:
    """FileNotFoundError with the program's own message is the same words as infra.missing-file's."""
    got, confidence = _decided(_raised("FileNotFoundError: checkpoint dir runs/exp12/ckpt-400 not found"))
    assert got == "infra"
    assert confidence < PERMANENT


def test_a_permission_the_environment_refused_still_reaches_the_threshold() -> None:
    got, confidence = _decided(_raised("PermissionError: cannot write to /mnt/ckpt/exp12"))
    assert (got, confidence) == ("infra", PERMANENT)


def test_kubernetes_warnings_alone_say_the_environment_below_the_threshold() -> None:
    """A pod that never started shows only the warnings of what Kubernetes retried: the environment, likely."""
    got, confidence = _decided(KUBE_EVENTS.rsplit("\n", 1)[0])
    assert got == "infra"
    assert confidence < PERMANENT


def test_a_library_probed_at_start_up_does_not_make_a_victim_a_failure_of_its_own() -> None:
    timed_out = (
        "[rank1]:[E1127 06:41:00.100 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
    )
    f = assess(member("w-1", 1, f"{NCCL_PLUGIN_PROBE}\n{timed_out}"))
    assert (f.role, f.secondary) == ("secondary", "timeout")
    missing = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
    assert _alone(_raised(missing))[0] == "infra"
