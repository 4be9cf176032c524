"""Rules: built-in classification per family, and operator rules files (precedence, errors)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from podmortem.core.errorfile import exception_type_of
from podmortem.core.rules import DEFAULT_RULES, RulesError, load_rules


def classify(message: str) -> tuple[str | None, str | None, bool]:
    """(category, secondary kind, weak) of an error message under the built-in rules."""
    r = DEFAULT_RULES.classify_message(message, exception_type_of(message))
    assert r is not None, message
    return r.category, r.secondary, r.weak


@pytest.mark.parametrize(
    ("message", "category"),
    [
        # CUDA / device faults
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be ...", "hardware"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "hardware"),
        ("RuntimeError: CUDA error: unspecified launch failure", "hardware"),
        ("RuntimeError: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "hardware"),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error",
            "infra",
        ),
        ("RuntimeError: CUDA error: device-side assert triggered", "user_code"),
        # NCCL refusing the job's own set-up is the configuration, not a network fault
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid usage (run with "
            "NCCL_DEBUG=WARN for details), NCCL version 2.19.3",
            "user_code",
        ),
        ("RuntimeError: CUDA error: an illegal instruction was encountered", "crash"),
        ("RuntimeError: Found no NVIDIA driver on your system.", "infra"),
        # GPU and host memory
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "gpu_oom"),
        ("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 5 has a total capacity", "gpu_oom"),
        ("RuntimeError: CUDA error: out of memory", "gpu_oom"),
        ("RuntimeError: DataLoader worker (pid 21697) is killed by signal: Killed. ", "host_oom"),
        ("MemoryError: ", "host_oom"),
        ("RuntimeError: DataLoader worker (pid 9943) is killed by signal: Bus error. ", "infra"),
        # NCCL / network: the interconnect named
        (
            "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error\nNET/IB : port error",
            "network",
        ),
        # environment
        ("FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-0001.bin'", "infra"),
        ("PermissionError: [Errno 13] Permission denied: '/ckpt/step-100'", "infra"),
        ("OSError: [Errno 28] No space left on device", "infra"),
        ("OSError: [Errno 30] Read-only file system: '/mnt/ckpt'", "infra"),
        ("OSError: [Errno 116] Stale file handle", "infra"),
        # the program
        ("loss is nan at step 1200, stopping training", "user_code"),  # no exception type: needs the rule
        ("FloatingPointError: Non-finite loss detected", "user_code"),
        ("ValueError: Caught ValueError in DataLoader worker process 0.\nOriginal Traceback ...", "user_code"),
        ("KeyError: 'cosine_restarts'", "user_code"),
        ("CheckpointStateError: optimizer state for param group 0 has no 'moment'", "user_code"),
        ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x12 and 16x32)", "user_code"),
        # launcher wrappers: the signal a worker died of, in Python's and the agent's words
        ("subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGSEGV: 11>.", "crash"),
        ("subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGKILL: 9>.", "host_oom"),
        ("Signal 6 (SIGABRT) received by PID 4242", "crash"),
        ("subprocess.CalledProcessError: Command 'deepspeed' returned non-zero exit status -11.", "crash"),
        # the environment inside a Python error: it wins over the class that carries it
        ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.21 GiB for an array", "host_oom"),
        ("RuntimeError: unable to write to file </torch_31_2718281828_0>: No space left on device (28)", "infra"),
        ("RuntimeError: unable to open shared memory object </torch_31_27182_0> in read-write mode", "infra"),
        ("OSError: [Errno 24] Too many open files", "infra"),
        ("RuntimeError: can't start new thread", "infra"),
        (
            "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): "
            "Max retries exceeded with url: /api/models",
            "infra",
        ),
        ("huggingface_hub.utils._errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url", "infra"),
        ("RuntimeError: Failed to initialize NVML: Unknown Error", "infra"),
        ("OSError: ENOENT: cannot open '/datasets/train-00001.arrow'", "infra"),
        ("ssl.SSLError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", "infra"),
    ],
)
def test_primary_messages(message: str, category: str) -> None:
    cat, sec, weak = classify(message)
    assert (cat, sec) == (category, None)
    assert not weak


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (
            "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.4.2.7]:4455. "
            "This is typically caused by a remote worker crashing.",
            "peer",
        ),
        (
            "RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [10.0.0.3]:50065: Connection reset by peer.",
            "peer",
        ),
        (
            "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation "
            "to complete",
            "timeout",
        ),
        (
            "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 1800000ms "
            "for send operation to complete",
            "timeout",
        ),
        (
            "RuntimeError: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.",
            "timeout",
        ),
        ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed.", "store"),
        # waiting in the store for ranks that never came: the echo of their failure, not a bug of this rank
        (
            "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
            "store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)",
            "store",
        ),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: ", "store"),
        ("RuntimeError: Rank 3 failed to pass monitoredBarrier in 600000 ms", "timeout"),
        ("RuntimeError: [../gloo/transport/tcp/pair.cc:598] Application timeout caused pair closure", "timeout"),
        (
            "torch.distributed.DistBackendError: [5] is setting up NCCL communicator and retrieving ncclUniqueId from "
            "[0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
            "store",
        ),
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 21582 got signal: 15", "teardown"),
        ("SignalException: Process 7 got signal: 15", "teardown"),
        # older TCPStore words, Horovod's and Open MPI's echoes (domain knowledge, our words)
        ("RuntimeError: Socket Timeout", "store"),
        ("RuntimeError: Stop_waiting response is expected", "store"),
        (
            "horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. One of the ranks failed.",
            "peer",
        ),
        ("ORTE has lost communication with a remote daemon.", "peer"),
    ],
)
def test_secondary_messages(message: str, kind: str) -> None:
    cat, sec, _ = classify(message)
    assert (cat, sec) == (None, kind)


def test_weak_primaries() -> None:
    assert classify(
        "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there "
        "was a network error, NCCL version 2.21.5\nncclRemoteError: ..."
    ) == ("network", None, True)
    # NCCL's generic system error: a failed socket call, which a dying peer causes too.
    assert classify(
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\nncclSystemError: ..."
    ) == ("network", None, True)
    # A non-Python error file ({"message": "<text>"}) with no exception type.
    assert classify("segment writer gave up after 3 attempts") == ("user_code", None, True)


@pytest.mark.parametrize(
    ("code", "category", "secondary", "retryable"),
    [
        (1, "user_code", None, False),
        (2, "user_code", None, False),
        (127, "user_code", None, False),
        (139, "crash", None, False),
        (134, "crash", None, False),
        (138, "user_code", None, True),  # Kubeflow: user-retryable
        (143, None, "teardown", None),
        (130, None, "teardown", None),
        (137, None, "teardown", None),
    ],
)
def test_exit_codes_follow_kubeflow_policy(
    code: int, category: str | None, secondary: str | None, retryable: bool | None
) -> None:
    r = DEFAULT_RULES.classify_exit_code(code)
    assert r is not None
    assert (r.category, r.secondary, r.is_retryable) == (category, secondary, retryable)


def test_signals_reasons_conditions_phases() -> None:
    assert DEFAULT_RULES.classify_signal(11).category == "crash"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_signal(6).category == "crash"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_signal(9).category == "host_oom"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_signal(15).secondary == "teardown"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_reason("OOMKilled").category == "host_oom"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_reason("ContainerStatusUnknown").category == "node_lost"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_reason("Error") is None
    for reason in ("PreemptionByScheduler", "EvictionByEvictionAPI", "TerminationByKubelet"):
        r = DEFAULT_RULES.classify_disruption(reason)
        assert r is not None and r.category == "preemption" and r.is_retryable is True
    assert DEFAULT_RULES.classify_disruption("DeletionByTaintManager").category == "node_lost"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_phase("Unknown", "NodeLost").category == "node_lost"  # type: ignore[union-attr]
    assert DEFAULT_RULES.classify_phase("Failed", "") is None
    assert DEFAULT_RULES.classify_log_line("[12345.6] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE") is not None


def write(tmp_path: Path, doc: object, name: str = "rules.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_operator_rules_take_precedence(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "rules": [
                # This site's storage layer raises KeyError when a shard is missing: that is infra, not a bug.
                {
                    "id": "site.shard-missing",
                    "message": r"KeyError: 'shard-\d+'",
                    "category": "infra",
                    "advice": "Re-sync the dataset cache.",
                },
                {"id": "site.retry-wrapper", "message": "RetryWrapperGaveUp", "secondary": "peer"},
                {"id": "site.exit-42", "exit_code": 42, "category": "hardware", "retryable": False},
            ]
        },
    )
    rules = load_rules(path)
    r = rules.classify_message("KeyError: 'shard-0042'", "KeyError")
    assert r is not None and (r.id, r.category, r.is_retryable, r.operator) == (
        "site.shard-missing",
        "infra",
        True,
        True,
    )
    assert rules.classify_message("KeyError: 'lr'", "KeyError").id == "python.exception"  # type: ignore[union-attr]
    assert rules.classify_message("RetryWrapperGaveUp: x", "RetryWrapperGaveUp").secondary == "peer"  # type: ignore[union-attr]
    r42 = rules.classify_exit_code(42)
    assert r42 is not None and (r42.category, r42.is_retryable) == ("hardware", False)
    assert rules.classify_exit_code(139).category == "crash"  # type: ignore[union-attr]  # defaults still there


def test_replace_defaults(tmp_path: Path) -> None:
    rules = load_rules(
        write(
            tmp_path,
            {"replace_defaults": True, "rules": [{"id": "only", "exception_type": "ValueError", "category": "infra"}]},
        )
    )
    assert [r.id for r in rules.rules] == ["only"]
    assert rules.classify_message("KeyError: x", "KeyError") is None


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[" * 100_000, "nested too deeply"),
        ([1, 2], "top level must be an object"),
        ({"rules": {}}, "'rules' must be a list"),
        ({"rulez": []}, "unknown top-level key"),
        ({"rules": [{"message": "x", "category": "infra"}]}, "needs a non-empty string 'id'"),
        ({"rules": [{"id": "a", "category": "infra"}]}, "needs exactly one matcher"),
        ({"rules": [{"id": "a", "message": "x", "exit_code": 1, "category": "infra"}]}, "needs exactly one matcher"),
        ({"rules": [{"id": "a", "message": "x"}]}, "needs exactly one outcome"),
        ({"rules": [{"id": "a", "message": "x", "category": "gpu_melted"}]}, "unknown category 'gpu_melted'"),
        ({"rules": [{"id": "a", "message": "x", "secondary": "victim"}]}, "unknown secondary kind"),
        ({"rules": [{"id": "a", "message": "(unclosed", "category": "infra"}]}, "not a valid regular expression"),
        ({"rules": [{"id": "a", "exit_code": "1", "category": "infra"}]}, "must be an integer"),
        ({"rules": [{"id": "a", "message": "x", "category": "infra", "retryable": "yes"}]}, "'retryable' must be"),
        ({"rules": [{"id": "a", "message": "x", "category": "infra", "severity": 3}]}, "unknown key(s) severity"),
        (
            {
                "rules": [
                    {"id": "a", "message": "x", "category": "infra"},
                    {"id": "a", "message": "y", "category": "infra"},
                ]
            },
            "used twice",
        ),
        ({"version": 2, "rules": []}, "unsupported 'version'"),
    ],
)
def test_bad_rules_file_is_a_clear_error(tmp_path: Path, doc: object, expected: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(RulesError) as info:
        load_rules(path)
    text = str(info.value)
    assert expected in text
    assert str(path) in text and "\n" not in text


def test_the_built_in_rules_are_a_rules_file_an_operator_could_write(tmp_path: Path) -> None:
    """rules.yaml is read by the operator's path: as a file with replace_defaults it yields the same rules."""
    text = resources.files("podmortem.core").joinpath("rules.yaml").read_text(encoding="utf-8")
    copy = tmp_path / "mine.yaml"
    copy.write_text(text + "\nreplace_defaults: true\n", encoding="utf-8")
    loaded = load_rules(copy)
    assert [(r.id, r.kind, r.pattern and r.pattern.pattern, r.category, r.secondary) for r in loaded.rules] == [
        (r.id, r.kind, r.pattern and r.pattern.pattern, r.category, r.secondary) for r in DEFAULT_RULES.rules
    ]
    assert all(r.operator for r in loaded.rules) and not any(r.operator for r in DEFAULT_RULES.rules)


def test_a_yaml_rules_file_with_comments_alternatives_and_shared_parts(tmp_path: Path) -> None:
    path = tmp_path / "site.yml"
    path.write_text(
        """
# Our storage gateway's words for a dead mount, shared by two rules.
definitions:
  gateway-down: &gateway-down
    - 'gw: backend (unreachable|timed out)'
    - 'gw: lease lost'
rules:
- id: site.gateway-message
  message:
    - 'GatewayError'
    - *gateway-down        # a nested list is flattened into the alternatives
  category: infra
- id: site.gateway-log
  log: [*gateway-down]
  category: infra
  retryable: true
""",
        encoding="utf-8",
    )
    rules = load_rules(path)
    for text in ("GatewayError: no", "gw: backend timed out", "gw: lease lost"):
        r = rules.classify_message(text, exception_type_of(text))
        assert r is not None and r.id == "site.gateway-message", text
    other = rules.classify_message("gw: backend up", "")
    assert other is None or not other.id.startswith("site.")
    found = rules.first_log_rule("step 9\ngw: lease lost\n")
    assert found is not None and (found.id, found.category) == ("site.gateway-log", "infra")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rules: [\n", "not valid YAML"),
        # an alias that makes the list contain itself
        ("rules:\n- id: a\n  message: &loop [*loop]\n  category: infra\n", "list of non-empty alternatives"),
        ("rules:\n- id: a\n  message: []\n  category: infra\n", "list of non-empty alternatives"),
        ("rules:\n- id: a\n  message: ['x', 3]\n  category: infra\n", "list of non-empty alternatives"),
        ("- just a list\n", "top level must be an object"),
    ],
)
def test_bad_yaml_rules_file_is_a_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RulesError) as info:
        load_rules(path)
    assert expected in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="rules file not found"):
        load_rules(tmp_path / "absent.json")
    with pytest.raises(RulesError, match="is a directory"):
        load_rules(tmp_path)


def test_bad_rule_names_the_rule(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "rules": [
                {"id": "ok", "message": "x", "category": "infra"},
                {"id": "broken", "message": "[", "category": "infra"},
            ]
        },
    )
    with pytest.raises(RulesError, match=r"rule #2 \('broken'\)"):
        load_rules(path)


def test_a_log_rule_must_be_linear_time_re2_syntax() -> None:
    from podmortem.core.rules import RulesError, rule_from_dict

    ok = rule_from_dict({"id": "x.ok", "log": r"GPU \d+ fell off", "category": "hardware"})
    assert ok.matches_text("boot\nGPU 3 fell off\n")
    with pytest.raises(RulesError, match="RE2"):
        rule_from_dict({"id": "x.backref", "log": r"(a+)\1", "category": "hardware"})
    with pytest.raises(RulesError, match="RE2"):
        rule_from_dict({"id": "x.lookahead", "log": r"Xid(?= 79)", "category": "hardware"})


@pytest.mark.parametrize(
    ("line", "category"),
    [
        (
            "[default3]:RuntimeError: unable to mmap 1024 bytes from file </torch_1_2_3>: Cannot allocate memory",
            "infra",
        ),
        # an image name the registry does not have is the job's (the labelling guide's image rows)
        ('ERROR: Failed to pull image "registry.local/train:v3": manifest unknown', "user_code"),
        ('Warning  FailedMount  kubelet  MountVolume.SetUp failed for volume "data"', "infra"),
        ("Workers (tasks / actors) killed due to memory pressure (OOM), 0 workers crashed", "host_oom"),
        ("free(): invalid pointer", "crash"),
        ("*** stack smashing detected ***: terminated", "crash"),
        # SIGBUS: a mapped page without backing storage (/dev/shm, a mapped file) — the environment
        ("E1124 12:00:01 torch/distributed/elastic: died with <Signals.SIGBUS: 7>.", "infra"),
        ("  traceback : Signal 7 (SIGBUS) received by PID 4242", "infra"),
        ("/bin/sh: line 1:  77 Bus error               (core dumped) python train.py", "infra"),
        ("mce: [Hardware Error]: Machine check events logged", "hardware"),
        # families seen in the training excerpts (written here in our own words)
        ("gpu3:1201:1290 [3] transport/nvls.cc:161 NCCL WARN Cuda failure 1 'invalid argument'", "hardware"),
        ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152", "hardware"),
        ("host7:77:90 [0] enqueue.cc:1090 NCCL WARN Cuda failure 'out of memory'", "gpu_oom"),
        (
            "host7:77:90 [1] misc/socket.cc:480 NCCL WARN socketStartConnect: Connect to 10.1.2.3<4455> failed",
            "network",
        ),
        ("The NVIDIA driver on your system is too old (found version 11020).", "infra"),
        ("    super().__init__(torch._C.PyTorchFileWriter(str(name)))", "infra"),
        # more families seen in the training excerpts (our own words)
        (
            "n3:11:12 [2] init.cc:500 NCCL WARN Duplicate GPU detected : rank 2 and rank 1 both on CUDA device 3000",
            "user_code",
        ),
        ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "user_code"),
        (
            "slurmstepd: error: Detected 2 oom-kill event(s) in StepId=77.0. Some processes may have been killed",
            "host_oom",
        ),
        ("/var/spool/slurmd/job7/slurm_script: line 9:  4242 Killed                  python train.py", "host_oom"),
        ("[  12.3] NVRM: GPU3 _kgspLogRpcTimeout: ********** GSP Timeout **********", "hardware"),
        ("2025/01/01 10:00:00 Metadata server says termination is imminent", "preemption"),
        ("nslookup: can't resolve 'job-master-0': Name does not resolve", "network"),
        ("RuntimeError: CUDA error: an illegal instruction was encountered", "crash"),
        # general families (our own words): the shell's Killed after a progress bar, node pressure, errno forms,
        # the dynamic loader, AWS's EFA plugin
        ("epoch 3:  41%|####      | 410/1000 [02:11<03:09,  3.11it/s]Killed", "host_oom"),
        ("Warning  Evicted  pod/w-1  The node had condition: [DiskPressure].", "infra"),
        ("Warning  Evicted  pod/w-2  The node had condition: [MemoryPressure].", "host_oom"),
        ("failed to write shard: os error 28", "infra"),
        ("write checkpoint: ENOSPC", "infra"),
        # NCCL ships in the image (the CUDA base image, the nvidia-nccl wheel): the image's packages, not the node's
        ("python: error while loading shared libraries: libnccl.so.2: cannot open", "user_code"),
        ("python: error while loading shared libraries: libcuda.so.1: cannot open", "infra"),
        ("h1:7:9 [0] NCCL WARN NET/OFI Request completed with error. RC: -5", "network"),
        ("torch.OutOfMemoryError: Tried to allocate 1.50 GiB. GPU 2 has a total capacity of 79 GiB", "gpu_oom"),
        ("RuntimeError: No CUDA GPUs are available", "infra"),
        ("Unable to reset this GPU: GPU requires reset", "hardware"),
        ("h2:3:4 [1] NCCL WARN Cuda failure 'unknown error'", "hardware"),
        ("ray.exceptions.RayOutOfMemoryError: More than 95% of the memory on node w-3 is used", "host_oom"),
        ("socket.gaierror: [Errno -2] Name or service not known", "network"),
        ("*** SIGSEGV (@0x0) received by PID 41 (TID 0x7f) from PID 0; stack trace: ***", "crash"),
        # the environment: driver stack, container runtime, storage, endpoints, scheduling (domain knowledge, our words)
        ("Failed to initialize NVML: Driver/library version mismatch", "infra"),
        ("CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment", "infra"),
        ("RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.", "infra"),
        ("./train: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by ./train)", "infra"),
        ("OSError: [Errno 121] Remote I/O error: '/mnt/lustre/ckpt'", "infra"),
        ('IoError(Os { code: 122, kind: QuotaExceeded, message: "Disk quota exceeded" })', "infra"),
        ("requests.exceptions.ReadTimeout: HTTPSConnectionPool read timed out. (read timeout=10)", "infra"),
        ("Warning  FailedScheduling  0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", "infra"),
        ("Warning  FailedAttachVolume  Multi-Attach error for volume pvc-7", "infra"),
        # the job's own set-up (domain knowledge, our words)
        ("RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running ALLGATHER", "user_code"),
        ("torch.AcceleratorError: CUDA error: invalid device ordinal", "user_code"),
        (
            "[W socket.cpp:400] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already "
            "in use).",
            "infra",
        ),
        ("RuntimeError: CUDA error: misaligned address", "crash"),
        # reclaimed from outside, or the node gone (domain knowledge, our words)
        ('{"Type": "terminate", "Action": "instance-action", "Time": "2026-11-25T01:00:00Z"}', "preemption"),
        ('ScheduledEvents: {"EventId": "A1", "EventType": "Preempt", "ResourceType": "VirtualMachine"}', "preemption"),
        ("Shutdown manager detected new shutdown event: graceful node shutdown in progress", "preemption"),
        ("evicting pod ml/w-3 as part of a node drain", "preemption"),
        ("[rank: 0] Received SIGUSR1: handling auto-requeue signal", "preemption"),
        ("our job was preempted by a higher-priority workload", "preemption"),
        ("slurmstepd: error: *** JOB 88 ON n12 CANCELLED AT 2026-11-25T01:00:00 DUE TO NODE FAILURE ***", "node_lost"),
        # network named by the system (domain knowledge, our words)
        ("n1:5:6 [0] NCCL INFO Bootstrap : no socket interface found", "network"),
        ("[1698] UCX  ERROR ib_iface.c:120 ibv_poll_cq returned 5: transport error", "network"),
        ("[ 9.1] mlx5_core 0000:3b:00.0: mlx5_cmd_out_err: CREATE_QP failed, status bad parameter", "network"),
        ("kernel: ice 0000:17:00.0 ens1f0: NIC Link is Down", "network"),
        ("OSError: [Errno 113] No route to host", "network"),
        ("RuntimeError: [gloo/transport/tcp/device.cc:83] Unable to find address for: ib0", "network"),
    ],
)
def test_log_lines_name_their_cause(line: str, category: str) -> None:
    rule = DEFAULT_RULES.first_log_rule(f"step 10 loss 2.3\n{line}\n")
    assert rule is not None and rule.category == category, rule
