"""A failure of the pod's own in the words of a stack other than torch on CUDA: ROCm/HIP, Ascend NPUs (CANN, torch_npu,
MindSpore), Habana Gaudi (synapse), TPUs and XLA, TensorFlow, PaddlePaddle, Intel XPU (Level Zero / Unified Runtime),
and other languages' training (Rust, Julia, Lua) with the shell that runs it. Each stack prints the same families in
words of its own: its accelerator's memory exhausted, its device or the device's links failing, no device to use, its
launcher's word on a worker's end, its runtime's uncaught error. The texts are written for these tests in the formats
those tools print; each member is read the way a pod watch sees it (the log tail and the exit code)."""

from __future__ import annotations

import pytest
from support.members import member

from podmortem.core.assess import assess
from podmortem.core.conditions import PERMANENT_CONFIDENCE
from podmortem.core.engine import decide
from podmortem.core.model import Incident, JobRef, Member

TB = 'step 40 loss 2.21\nTraceback (most recent call last):\n  File "train.py", line 88, in <module>\n'
WATCHDOG = (
    "[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds "
    "before timing out.\n"
)


def _verdict(root_log: str, exit_code: int = 1):  # type: ignore[no-untyped-def]
    """The root among two members that timed out waiting for it."""
    members: tuple[Member, ...] = (
        member("w-0", 0, WATCHDOG.format(r=0)),
        member("w-1", 1, root_log, exit_code=exit_code),
        member("w-2", 2, WATCHDOG.format(r=2)),
    )
    return decide(Incident(job=JobRef("ml", "j", "PyTorchJob"), world_size=3, members=members))


# --- an accelerator's memory exhausted ----------------------------------------------------------------------------
PADDLE_OOM = (
    "MemoryError: \n\n"
    "--------------------------------------\n"
    "C++ Traceback (most recent call last):\n"
    "--------------------------------------\n"
    "0   paddle::memory::allocation::Allocator::Allocate(unsigned long)\n\n"
    "----------------------\n"
    "Error Message Summary:\n"
    "----------------------\n"
    "ResourceExhaustedError: \n\n"
    "Out of memory error on GPU 2. Cannot allocate 1.250000GB memory on GPU 2, 30.5GB memory has been allocated and "
    "available memory is only 212.000000MB.\n\n"
    "Please check whether there is any other process using GPU 2.\n"
)


@pytest.mark.parametrize(
    "text",
    [
        # PaddlePaddle's allocator (raised in Python as a MemoryError: the class is its carrier, the summary says whose)
        PADDLE_OOM,
        "MemoryError: ResourceExhaustedError: Out of memory error on XPU 1. Cannot allocate 2.0GB memory on XPU 1",
        # Habana Gaudi's device memory module
        "RuntimeError: [Rank:3] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB",
        # Intel XPU under the Unified Runtime / Level Zero
        "RuntimeError: level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)",
        "RuntimeError: Native API failed. Native API returns: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
        # MindSpore's Ascend memory adapter
        "RuntimeError: Malloc device memory failed, size[1073741824], ret[207001], Device 0 Available HBM size:65452 "
        "free size:1046 may be other processes occupying this card, check as: ps -ef|grep python",
        # TensorFlow creating its CUDA context on a device without room for it
        "tensorflow.python.framework.errors_impl.InternalError: CUDA runtime implicit initialization on GPU:0 failed. "
        "Status: out of memory",
        # PJRT's GPU allocator under JAX
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 5.41GiB on device "
        "ordinal 0: while running replica 0 and partition 0 of a replicated computation",
        # MindSpore's runtime unable to allocate a kernel's output on the device
        "RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: Default/MatMul-op12, alloc "
        "size: 8589934592B.",
        # PaddlePaddle's words for CUDA's out-of-memory result
        "OSError: (External) CUDA error(2), out of memory.",
        # XLA's older status words (TensorFlow's "Resource exhausted:") for a device buffer that does not fit
        "Resource exhausted: Attempting to reserve 10.14G at the bottom of memory. That was not possible. There are "
        "5.50G free, 0B reserved, and 5.50G reservable.",
    ],
)
def test_an_accelerator_s_memory_exhausted_in_its_stack_s_words_is_gpu_oom(text: str) -> None:
    f = assess(member("w-1", 1, TB + text + "\n"))
    assert (f.role, f.category) == ("primary", "gpu_oom")
    v = _verdict(TB + text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", "gpu_oom", False)
    assert v.confidence >= PERMANENT_CONFIDENCE


# --- the device, its memory or its links failing -----------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        # torch_npu's task queue told by the runtime of an uncorrectable error in the NPU's memory, or of its chip link
        "RuntimeError: UCE ERROR, [ERROR] 2030-01-01-10:00:00 (PID:4411, Device:3, RankID:3) ERR00100 PTA call acl "
        "api failed",
        "RuntimeError: HCCS LINK ERROR, EZ9999: Inner Error! [ERROR] 2030-01-01-10:00:00 (PID:4411, Device:3, "
        "RankID:3) ERR00100 PTA call acl api failed",
        # the CANN runtime's own reasons for the same, as torch_npu quotes them
        "RuntimeError: ACL stream synchronize failed.\nEZ9999: Inner Error!\n        rtStreamSynchronize execute "
        "failed, reason=[device mem error][FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]",
        "RuntimeError: ACL stream synchronize failed.\n        rtStreamSynchronize execute failed, reason=[link error]",
        # the amdgpu driver losing its device from the PCIe bus
        "amdgpu 0000:08:00.0: device lost from bus!\namdgpu 0000:08:00.0: SMU: bus error for message",
        # HIP's name for an uncorrectable ECC error
        "RuntimeError: HIP error: hipErrorECCNotCorrectable\nHIP kernel errors might be asynchronously reported",
    ],
)
def test_a_device_named_as_failing_in_its_stack_s_words_is_hardware(text: str) -> None:
    v = _verdict(TB + text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", "hardware", True)
    assert v.confidence >= PERMANENT_CONFIDENCE


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # CANN's allocation failure, which does not say whose memory (the device's, most often)
        (
            "EL0004: [PID: 4411] 2030-01-01-10:00:00.100.200 Memory_Allocation_Failure(EL0004): Failed to allocate "
            "memory requested by GE module.\n        Possible Cause: Available memory is insufficient.",
            "gpu_oom",
        ),
        # TensorFlow's copy into a destination tensor that was never allocated
        (
            "tensorflow.python.framework.errors_impl.InternalError: Dst tensor is not initialized.",
            "gpu_oom",
        ),
        # ROCm's runtime: the GPU's queue hung (a kernel or the driver as often as the device)
        (
            "HW Exception by GPU node-1 (Agent handle: 0x1b0fc990) reason :GPU Hang",
            "hardware",
        ),
        (
            "RuntimeError: HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the "
            "largest legal address.",
            "hardware",
        ),
        # the amdgpu driver's interrupt handlers in the kernel log: the shader sequencer's error interrupts, a GPU page
        # fault and the VM L2 protection fault status printed with it (a kernel's bad access prints these too)
        (
            "[812.100200] amdgpu: sq_intr: error, detail 0x00000000, type 1, sh 0, priv 1, wave_id 3, simd_id 2\n"
            "[812.100230] amdgpu: sq_intr: error, detail 0x00000000, type 2, sh 1, priv 1, wave_id 5, simd_id 0",
            "hardware",
        ),
        (
            "[77.5] amdgpu 0000:43:00.0: GPU fault detected: 147 0x00a4480c\n"
            "[77.5] amdgpu 0000:43:00.0:   VM_CONTEXT1_PROTECTION_FAULT_ADDR   0x00001a2b",
            "hardware",
        ),
        (
            "[90.1] amdgpu 0000:c1:00.0: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:3 pasid:32771)\n"
            "[90.1] amdgpu 0000:c1:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00301031",
            "hardware",
        ),
        # the same interrupts in the forms other kernels print: the shader sequencer's through dev_* after the PCI
        # address alone, a page fault with no retry word (gmc_v10_0 and later)
        (
            "[40.2] amdgpu 0000:0b:00.0: sq_intr: error, detail 0x00000000, type 2, sh 0, priv 1, wave_id 1, simd_id 3",
            "hardware",
        ),
        (
            "[41.7] amdgpu 0000:0b:00.0: amdgpu: [mmhub] page fault (src_id:0 ring:8 vmid:4 pasid:32770)",
            "hardware",
        ),
        # amdgpu's RAS counts of uncorrectable errors in a block: cumulative, printed again by a health query
        ("[300.1] amdgpu 0000:c1:00.0: amdgpu: 4 uncorrectable hardware errors detected in umc block", "hardware"),
        (
            "[300.1] amdgpu 0000:c1:00.0: {12} socket: 0, die: 2, 1 new uncorrectable hardware errors detected in "
            "gfx block",
            "hardware",
        ),
        # TensorFlow's hint after an allocation failed (XRT compiling for a TPU): the host's allocator prints it too
        (
            "\t [[{{node XRTCompile}}]]\nHint: If you want to see a list of allocated tensors when OOM happens, add "
            "report_tensor_allocations_upon_oom to RunOptions for current allocation info.",
            "gpu_oom",
        ),
        # the amdgpu driver's scheduler finding a ring timed out
        (
            "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1234, emitted seq=1236",
            "hardware",
        ),
        # an Ascend AI core's exception (a kernel that faulted on the NPU)
        (
            "EZ9999: Inner Error!\nEZ9999: [PID: 4411] The error from device(chipId:0, dieId:0), serial number is 3, "
            "there is an aicore error exception, core id is 5, error code = 0x800000",
            "hardware",
        ),
        # Level Zero's device lost: hung, reset or removed
        (
            "RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)",
            "hardware",
        ),
        # a TPU core that halted on a check of the program's own (the runtime says "perhaps": the chip, too)
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Core halted unexpectedly: INTERNAL: Accelerator device "
            "halted prematurely, perhaps due to an on-device check-failure. Node 0 halted unexpectedly",
            "crash",
        ),
        # the CANN runtime's reason for an AI core's exception
        (
            "EZ9999: Inner Error!\n        rtStreamSynchronize execute failed, reason=[aicore exception]",
            "hardware",
        ),
        # torch_npu's suspected (not confirmed) memory error
        (
            "RuntimeError: SUSPECT MEM ERROR, [ERROR] ERR00100 PTA call acl api failed",
            "hardware",
        ),
    ],
)
def test_words_another_family_prints_too_are_read_below_the_threshold(text: str, category: str) -> None:
    """Words that most often mean the device's memory but do not say whose, and device faults that a kernel's bug
    prints too: the family's reading, capped."""
    v = _verdict(TB + text + "\n")
    assert (v.pod, v.category) == ("w-1", category)
    assert v.confidence < PERMANENT_CONFIDENCE


def test_an_interconnect_s_retry_failing_is_the_network_but_a_peer_s_death_says_more() -> None:
    """HCCL giving up its retries of a collective on a link: the network, or a peer that went away (weak)."""
    f = assess(member("w-1", 1, TB + "RuntimeError: HCCL OP RETRY FAILED, [ERROR] ERR00100 PTA call acl api failed\n"))
    assert (f.role, f.category, f.rule.weak if f.rule else None) == ("primary", "network", True)


def test_amdgpu_s_all_clear_of_its_error_counts_is_no_fault() -> None:
    """The RAS count's all-clear spells the same words after "no"."""
    log = "[300.1] amdgpu 0000:c1:00.0: amdgpu: no uncorrectable hardware errors detected in umc block"
    assert assess(member("w-1", 1, log)).category != "hardware"


def test_a_word_that_only_contains_the_letters_of_a_device_error_is_not_one() -> None:
    """ "reduce" holds the letters of UCE: the torch_npu word is a whole one."""
    f = assess(member("w-1", 1, TB + "RuntimeError: reduce error: the tensors differ in size\n"))
    assert f.category == "user_code"


# --- no device to use --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        # libtpu is single-tenant: another process (a leftover of the last run) holds the chips
        "jaxlib.xla_extension.XlaRuntimeError: ABORTED: The TPU is already in use by process with pid 27846. Not "
        "attempting to load libtpu.so in this process.",
        # torch's device manager on a ROCm build finding no GPU; rocBLAS finding none either
        "RuntimeError: No HIP GPUs are available",
        "rocBLAS error: Could not initialize Tensile host: No devices found\nAborted (core dumped)",
        # Habana's synapse finding no card to acquire
        "RuntimeError: synStatus=8 [Device not found] Device acquire failed.",
        # PaddlePaddle unable to load a CUDA library from the node's or image's library path
        "OSError: (PreconditionNotMet) The third-party dynamic library (libcudnn.so) that Paddle depends on is not "
        "configured correctly. (error code is libcudnn.so: cannot open shared object file: No such file or directory)",
    ],
)
def test_no_device_to_use_in_its_stack_s_words_is_the_environment(text: str) -> None:
    v = _verdict(TB + text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", "infra", True)


# --- native aborts and launchers' words ---------------------------------------------------------------------------
CHECK_FAILED = (
    "F0101 10:00:00.100000 4411 gpu_executable.cc:612] Check failed: buffer_size >= 0\n"
    "*** Check failure stack trace: ***\n"
    "    @     0x7f3a1c2b5f2d  absl::lts_20230802::log_internal::LogMessageFatal::~LogMessageFatal()\n"
)


def test_a_failed_check_of_a_native_library_is_a_crash_below_the_threshold() -> None:
    """glog's and absl's fatal check aborts the process: a native crash, but a victim's check can fail on a lost
    peer too."""
    v = _verdict(CHECK_FAILED)
    assert (v.pod, v.category) == ("w-1", "crash")
    assert v.confidence < PERMANENT_CONFIDENCE


def test_a_failed_check_after_the_runtime_reported_another_task_s_failure_is_that_echo() -> None:
    log = (
        "F0101 10:00:00.1 4411 client.cc:112] Terminating process because the JAX distributed service detected "
        "fatal errors. This most likely indicates that another task died\n*** Check failure stack trace: ***\n"
    )
    f = assess(member("w-1", 1, log, exit_code=134))
    assert (f.role, f.secondary) == ("secondary", "peer")


@pytest.mark.parametrize(("code", "category"), [(-9, "host_oom"), (-11, "crash"), (1, "user_code")])
def test_paddle_s_launcher_word_on_a_worker_s_end_is_the_agent_s(code: int, category: str) -> None:
    """paddle.distributed.launch's summary of a container (a worker) that failed names its exit code (negative: the
    signal), as torchrun's summary does."""
    log = (
        "LAUNCH INFO 2030-01-01 10:00:00,100 Pod failed\n"
        "LAUNCH ERROR 2030-01-01 10:00:00,100 Container failed !!!\n"
        f"Container rank 0 status failed cmd ['/usr/bin/python', '-u', 'train.py'] code {code} log log/workerlog.0\n"
    )
    f = assess(member("w-1", 1, log))
    assert (f.role, f.category) == ("primary", category)


def test_paddle_s_host_allocator_out_of_memory_is_the_host_s() -> None:
    line = "ResourceExhaustedError: Fail to alloc memory of 46549499904 size, error code is 12."
    v = _verdict(TB + line + "\n")
    assert (v.pod, v.category) == ("w-1", "host_oom")


def test_tensorflow_s_allocator_naming_the_cpu_is_host_memory_and_naming_a_gpu_the_device_s() -> None:
    where = "on /job:worker/replica:0/task:1/device:{d}:0 by allocator {a}"
    line = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8,40]"
    host = assess(member("w-1", 1, TB + line + " " + where.format(d="CPU", a="cpu") + "\n"))
    device = assess(member("w-1", 1, TB + line + " " + where.format(d="GPU", a="GPU_0_bfc") + "\n"))
    assert (host.category, device.category) == ("host_oom", "gpu_oom")


def test_the_port_hccl_could_not_bind_is_taken_on_the_node() -> None:
    log = (
        "[rank0]: RuntimeError: create_config:torch_npu/csrc/distributed/HCCLUtils.cpp:140 HCCL function error: "
        "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 7\n"
        "[rank0]: [ERROR] 2030-01-01-10:00:00 (PID:4411, Device:0, RankID:-1) ERR02200 DIST call hccl api failed.\n"
        "[rank0]: [PID: 4411] 2030-01-01-10:00:00.100.200 Communication_Error_Bind_IP_Port(EJ0003): Failed to bind "
        "the IP port. Reason: The IP address and port have been bound already.\n"
    )
    v = _verdict(log)
    assert (v.pod, v.category, v.retryable) == ("w-1", "infra", True)


@pytest.mark.parametrize(
    "line",
    [
        # torch_npu's words for an HCCL call that failed, with no cause named: NCCL's generic error
        "RuntimeError: create:torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:89 HCCL function error: "
        "HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_)), error code is 2\n"
        "[ERROR] 2030-01-01-10:00:00 (PID:3674, Device:0, RankID:0) ERR02200 DIST call hccl api failed.",
    ],
)
def test_an_hccl_call_failing_with_no_cause_named_is_a_weak_network_failure(line: str) -> None:
    f = assess(member("w-1", 1, TB + line + "\n"))
    assert (f.role, f.category, f.rule.weak if f.rule else None) == ("primary", "network", True)


def test_xla_s_words_for_nccl_s_cuda_error_are_nccl_s() -> None:
    line = (
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_api.cc:501: NCCL operation "
        "ncclCommInitRank(&comm, nranks, nccl_id, rank) failed: unhandled cuda error (run with NCCL_DEBUG=INFO for "
        "details)."
    )
    v = _verdict(TB + line + "\n")
    assert (v.pod, v.category) == ("w-1", "infra")
    assert v.confidence < PERMANENT_CONFIDENCE


CCL_NO_PROVIDER = (
    "2030:01:01-10:00:00:( 4456) |CCL_ERROR| atl_ofi_helper.cpp:1384 atl_ofi_open_nw_provs: can not open network "
    "providers\n"
    "2030:01:01-10:00:00:( 4456) |CCL_ERROR| atl_ofi.cpp:243 init: can't find suitable provider\n"
    "failed to initialize ATL\n"
)


def test_the_collectives_library_unable_to_open_a_network_transport_is_the_network_below_the_threshold() -> None:
    v = _verdict(CCL_NO_PROVIDER)
    assert (v.pod, v.category, v.retryable) == ("w-1", "network", True)
    assert v.confidence < PERMANENT_CONFIDENCE


def test_a_provider_of_the_collectives_library_out_of_memory_is_the_interconnect_s_limit() -> None:
    log = (
        "2030:01:01-10:00:00:(168956) |CCL_ERROR| atl_ofi_helper.cpp:1204 atl_ofi_prov_init: fi_scalable_ep(prov->"
        "domain, info, &prov->sep, nullptr)\n fails with ret: -12, strerror: Cannot allocate memory\n"
    )
    f = assess(member("w-1", 1, log))
    assert (f.role, f.category) == ("primary", "network")


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # gloo's TCP pair connecting to its peer's host at start-up, in a Python exception and in the log alone
        (
            "RuntimeError: [/src/third_party/gloo/gloo/transport/tcp/pair.cc:611] Connect timeout [10.2.0.8]:41",
            "network",
        ),
        ("[W socket.cc:60] [gloo/transport/tcp/pair.cc:210] connect [10.2.0.8]:41000: Connection timed out", "network"),
        # newer gloo's connect retried to its deadline, its last try timed out
        (
            "RuntimeError: [/src/third_party/gloo/gloo/transport/tcp/pair.cc:1012] timed out connecting: SO_ERROR: "
            "Connection timed out, remote=[10.2.0.8]:41000",
            "network",
        ),
        # ProcessGroupGloo unable to form its mesh of pairs
        (
            "[E ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [gloo/transport/tcp/pair.cc:144] no error",
            "network",
        ),
        # a glog PCHECK on a socket to a named peer, errno 110 (ETIMEDOUT), and an MPI launcher's prefix before it
        (
            "[1,3]<stderr>:F0301 10:00:00.100 7731 SocketChannel.cpp:54] Check failed: n > 0  peer=10.2.0.8: "
            "Connection timed out [110]\n[1,3]<stderr>:*** Check failure stack trace: ***",
            "network",
        ),
        (
            "E0301 10:00:00.1 7731 van.cc:120] connect to node 9 failed, peer=trainer-2: Connection timed out [110]",
            "network",
        ),
        # XLA's runtime logging the failed communicator creation (no Python exception in the tail)
        (
            "W xla/service/gpu/runtime/support.cc:58] Intercepted XLA runtime error:\nINTERNAL: xla/service/gpu/"
            "nccl_utils.cc:275: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error",
            "infra",
        ),
        (
            "E0301 10:00:00.1 pjrt_stream_executor_client.cc:2593] Execution of replica 1 failed: INTERNAL: NCCL "
            "operation ncclGroupEnd() failed: unhandled cuda error; current tracing scope: all-reduce-start",
            "infra",
        ),
        # torch's words and PaddlePaddle's, logged rather than raised
        ("[rank1]: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.18.1", "infra"),
        ("E0301 10:00:00 nccl_helper.h:93] unhandled cuda error at [/paddle/platform/nccl_helper.h:93]", "infra"),
        # TensorStore's curl transport writing a checkpoint to an object store, then curl's low-speed limit
        (
            "W0301 10:00:00.1 7 curl_transport.cc:444] Error [28]=Timeout was reached in curl operation\nOperation "
            "too slow. Less than 1024 bytes/sec transferred the last 60 seconds",
            "infra",
        ),
        # TensorFlow's GCS file system over libcurl
        (
            "E tensorflow/core/platform/cloud/curl_http_request.cc:610] The transmission of request 0x5 has been "
            "stuck at 0 of 0 bytes for 61 seconds and will be aborted.\nError executing an HTTP request: libcurl code "
            "28 meaning 'Timeout was reached', error details: Operation timed out after 60001 milliseconds with 0 "
            "bytes received",
            "infra",
        ),
        ("curl: (28) Operation too slow. Less than 1000 bytes/sec transferred the last 30 seconds", "infra"),
    ],
)
def test_a_failure_of_the_platform_only_logged_in_a_stack_s_words_is_its_family_below_the_threshold(
    text: str, category: str
) -> None:
    """Words of a stack other than torch's, in logs with no exception line of their own. A socket connect that got no
    answer at all (no refusal: ETIMEDOUT) says the hosts cannot reach each other (network), but an unreachable peer's
    host gives it too. NCCL's CUDA error is the node's CUDA stack under NCCL (infra), but a faulting kernel surfaces
    there too; libcurl's timeout under an object store's client is the store the platform provides (infra), but the
    node's own network times a transfer out as well. So each stays below the threshold."""
    v = _verdict(text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", category, True)
    assert v.confidence < PERMANENT_CONFIDENCE


@pytest.mark.parametrize(
    "text",
    [
        'Error from server (BadRequest): container "trainer" in pod "j-master-0" is waiting to start: trying and '
        "failing to pull image",
        "Warning  Failed     12s   kubelet  Error: ErrImagePull",
        'Normal   BackOff    3s    kubelet  Back-off pulling image "registry.local/train:v3"',
        "j-worker-0   0/1     Init:ImagePullBackOff   0          4m",
        "Warning  Failed     2s    kubelet  Error: ErrImageNeverPull",
    ],
)
def test_an_image_that_could_not_be_pulled_is_the_platform_s(text: str) -> None:
    """The kubelet's and kubectl's words for a container whose image was never pulled: the program never ran."""
    f = assess(member("w-1", 1, text + "\n"))
    assert (f.role, f.category) == ("primary", "infra")


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (3221226505, False),  # 0xC0000409, a fail-fast abort (stack buffer overrun)
        (3221225477, False),  # 0xC0000005, an access violation
        (-1073741819, False),  # the same status, signed
    ],
)
def test_a_windows_status_as_a_spawned_process_s_exit_code_is_that_crash(code: int, retryable: bool) -> None:
    """torch.multiprocessing.spawn reports a Windows process's crash by its NTSTATUS as an exit code."""
    log = (
        TB + '  File "C:\\venv\\lib\\site-packages\\torch\\multiprocessing\\spawn.py", line 149, in join\n'
        "    raise ProcessExitedException(\n"
        f"torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code {code}\n"
    )
    v = _verdict(log)
    assert (v.pod, v.category, v.retryable) == ("w-1", "crash", retryable)


def test_a_spawned_process_s_small_exit_code_stays_the_program_s_own() -> None:
    log = TB + "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code 1\n"
    v = _verdict(log)
    assert (v.pod, v.category) == ("w-1", "user_code")


@pytest.mark.parametrize(
    "text",
    [
        # XLA's BFC allocator (JAX, TF) as a device allocation fails for good: the GPU's allocator names itself
        "2031-01-02 03:04:05.678901: W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_0_bfc) ran "
        "out of memory trying to allocate 12.50GiB (rounded to 13421772800)requested by op \nIf the cause is memory "
        "fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation."
        "\nCurrent allocation summary follows.",
        "W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_3_bfc) ran out of memory trying to "
        "allocate 768.0KiB (rounded to 786432)requested by op Conv2D\nCurrent allocation summary follows.",
        # XLA's client: executing a replica's program failed for want of memory, in TF1's and in newer status words
        "E0102 03:04:05.600 7 local_client.cc:672] Execution of replica 1 failed: Resource exhausted: Failed to "
        "allocate the program's temporary buffers",
        "E0102 03:04:05.600 7 pjrt_stream_executor_client.cc:2985] Execution of replica 0 failed: RESOURCE_EXHAUSTED: "
        "could not allocate 2147483648 bytes for the output",
    ],
)
def test_a_device_s_memory_in_xla_s_allocator_s_log_words_is_gpu_oom_below_the_threshold(text: str) -> None:
    """A GPU allocator's own words (its name says whose memory) and XLA's status for a replica that could not run for
    want of memory, in logs with no exception line: the device's memory. Below the threshold: a warning line, and
    XLA's CPU backend reports the host's memory in the same status."""
    v = _verdict(text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", "gpu_oom", False)
    assert v.confidence < PERMANENT_CONFIDENCE


def test_the_bfc_allocator_s_retry_that_went_on_is_no_failure_of_the_device_s_memory() -> None:
    """The same allocator's words with "The caller indicates that this is not a failure": it retried and went on, so
    a later error of the program's own says why the process ended."""
    text = (
        "W tensorflow/core/common_runtime/bfc_allocator.cc:243] Allocator (GPU_0_bfc) ran out of memory trying to "
        "allocate 2.19GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that "
        "there could be performance gains if more memory were available.\n"
        f"{TB}ValueError: labels must be integers\n"
    )
    f = assess(member("w-1", 1, text))
    assert (f.role, f.category) == ("primary", "user_code")


@pytest.mark.parametrize(
    "text",
    [
        # HCCL's EI0009 (CANN's error guide: the NPU's port, optics, addresses or switch link), in torch_npu's rank
        # prefix and in the code's name
        "[rank1]: EI0009: [PID: 812] 2031-01-02-03:04:05.678.901 Device 3 transport init error. Reason: The network "
        "port is down.",
        "RuntimeError: create link failed. EI0009 Communication_Error_Initialize_Transport: Device 1 transport init "
        "error. Reason: [Create][DestLink]Create Dest error!",
        # TensorPipe's InfiniBand layer (torch RPC) throwing an ibv_* call's errno
        'RuntimeError: In operator() at tensorpipe/common/ibv.h:172 "": No such device',
        'RuntimeError: In createQp at tensorpipe/transport/ibv/connection_impl.cc:88 "": Operation not supported',
        # gloo's ibverbs transport failing one of its checks, raised and aborted on
        "RuntimeError: [enforce fail at /src/third_party/gloo/gloo/transport/ibverbs/device.cc:128] rv != -1. "
        "ibv_query_port: Invalid argument",
        # NCCL's socket layer finding the connect refused on its recv, as a WARN and as torch's "Last error:"
        "gpu-2:81:90 [1] misc/socket.cc:476 NCCL WARN Net : Call to recv from 10.1.1.2<5021> failed : Connection "
        "refused",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.19.3\nLast error:\n"
        "Net : Call to recv from 10.0.0.7<43122> failed : Connection refused",
    ],
)
def test_a_communicator_s_transport_failing_at_set_up_in_any_library_s_words_is_the_network(text: str) -> None:
    """The links between the ranks could not be set up, in HCCL's, TensorPipe's, gloo's and NCCL's socket layer's
    words: the interconnect, retryable once it is fixed. Below the threshold: the link's other end may be a peer that
    failed (HCCL's own hint), and a refused connect is also a peer not listening yet."""
    v = _verdict(text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", "network", True)
    assert v.confidence < PERMANENT_CONFIDENCE


def test_nccl_s_recv_from_a_peer_that_reset_its_socket_stays_the_peer_s_echo() -> None:
    """Not a refusal: a peer that was there and closed its end (the labelling guide's peer row)."""
    f = assess(
        member("w-1", 1, "Last error:\nNet : Call to recv from 10.0.0.7<43122> failed : Connection reset by peer\n")
    )
    assert f.category != "network"


@pytest.mark.parametrize(
    "text",
    [
        # TensorFlow's GCS file system and GCS's IAM refusal of a TPU's service account
        "INFO:tensorflow:Error recorded from training_loop: Failed to get matching files on gs://b/ckpt/model.ckpt: "
        'Permission denied: Error executing an HTTP request: HTTP response code 403 with body \'{\n "error": {',
        "W0102 03:04:05.6 7 gcs_file_system.cc:1200] Error executing an HTTP request: HTTP response code 401 with body "
        "'Unauthorized'",
        "AccessDeniedException: 403 sa-77@proj.iam.gserviceaccount.com does not have storage.objects.get access to "
        "the Google Cloud Storage object.",
        '    "message": "service-1@cloud-tpu.iam.gserviceaccount.com does not have storage.buckets.get access to b."',
        # S3 through botocore's words, printed by a copy tool rather than raised
        "download failed: s3://b/ckpt/step_100.pt to ./step_100.pt An error occurred (403) when calling the "
        "HeadObject operation: Forbidden",
        "upload failed: ./model.bin to s3://b/model.bin An error occurred (AccessDenied) when calling the PutObject "
        "operation: Access Denied",
        # TensorFlow's PERMISSION_DENIED raised in Python, its cause on the next line
        "tensorflow.python.framework.errors_impl.PermissionDeniedError: From /job:worker/replica:0/task:2:\n"
        "/mnt/logs/run3; Permission denied\n\t [[{{node create_file_writer/CreateSummaryFileWriter}}]]",
    ],
)
def test_an_object_store_or_a_file_system_refusing_the_job_s_identity_is_the_platform_s(text: str) -> None:
    """The platform's identity for the pod (a service account, a role) refused by the store or file system the job
    reads or writes: the labelling guide's remote-endpoint and permission rows, retryable once access is granted.
    Below the threshold: the job's own config may name a bucket or path it was never meant to use."""
    v = _verdict(text + "\n")
    assert (v.pod, v.category, v.retryable) == ("w-1", "infra", True)
    assert v.confidence < PERMANENT_CONFIDENCE


# --- other languages' training, and the shell that runs it --------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        # Rust's default panic hook since 1.73: the location on the first line, the message on the next
        "epoch 2 step 310 loss 1.92\nthread 'main' panicked at src/trainer/step.rs:211:30:\n"
        "gradient buffer length 4096 does not match parameter length 2048\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        # the older hook's one line, from an unnamed worker thread of a crate the trainer links
        "thread '<unnamed>' panicked at 'called `Option::unwrap()` on a `None` value', "
        "/root/.cargo/registry/src/github.com-1ecc6299db9ec823/tensor-graph-0.4.1/src/backward.rs:77:41\n"
        "stack backtrace:\n   0: rust_begin_unwind",
    ],
)
def test_a_rust_panic_is_a_native_crash_of_its_own_below_the_threshold(text: str) -> None:
    """A panic is a Rust program's failed assertion, its own or a linked crate's: a native crash, the same on a
    retry; an unwrap() of an error the environment caused reads the same, so it stays below the threshold."""
    v = _verdict(text, exit_code=101)
    assert (v.pod, v.category, v.retryable) == ("w-1", "crash", False)
    assert v.confidence < PERMANENT_CONFIDENCE


@pytest.mark.parametrize(
    "text",
    [
        # Julia's top-level error in a script (include's LoadError around the error, then its stack trace)
        "ERROR: LoadError: MethodError: no method matching update!(::Adam, ::Chain{Tuple{Dense}}, ::Nothing)\n"
        "Stacktrace:\n [1] train_epoch(model::Chain{Tuple{Dense}}, opt::Adam)\n   @ Main ~/run/train.jl:41\n"
        "in expression starting at /home/u/run/train.jl:60",
        # and an error thrown outside include: the type, its message, the stack trace after a blank line
        "ERROR: BoundsError: attempt to access 3-element Vector{Float32} at index [4]\n\nStacktrace:\n"
        " [1] getindex\n   @ ./essentials.jl:13 [inlined]",
        # Lua's standalone interpreter ending on a script's error, with its traceback
        "/opt/torch/bin/luajit: ./model.lua:88: attempt to index field 'weight' (a nil value)\nstack traceback:\n"
        "        ./model.lua:88: in function 'build'\n        [C]: in function 'dofile'",
    ],
)
def test_another_language_s_uncaught_error_is_the_program_s_own_below_the_threshold(text: str) -> None:
    """Julia's and Lua's runtimes report a script's uncaught error in forms of their own: like a Python exception,
    the program's own to fix."""
    v = _verdict(text)
    assert (v.pod, v.category, v.retryable) == ("w-1", "user_code", False)
    assert v.confidence < PERMANENT_CONFIDENCE


@pytest.mark.parametrize(
    "text",
    [
        "THCudaCheck FAIL file=/build/cutorch/lib/THC/generic/THCTensorMath.cu line=141 error=8 : invalid device "
        "function\n/usr/local/bin/luajit: cuda runtime error (8) : invalid device function at "
        "/build/cutorch/lib/THC/generic/THCTensorMath.cu:141",
        "terminate called after throwing an instance of 'std::runtime_error'\n  what():  launch of fused_adam failed: "
        "cudaErrorNoKernelImageForDevice",
        "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
    ],
)
def test_a_gpu_kernel_with_no_code_for_the_device_is_the_image_s_build(text: str) -> None:
    """A kernel the program ships that was not built for the GPU's architecture: the image's build, the same on a
    retry on that node (a scheduler that placed it on another GPU model shares the words: below the threshold)."""
    v = _verdict(text, exit_code=134 if "terminate" in text else 1)
    assert (v.pod, v.category, v.retryable) == ("w-1", "user_code", False)
    assert v.confidence < PERMANENT_CONFIDENCE


@pytest.mark.parametrize(
    "text",
    [
        "Initializing distributed tasks at: 10.1.2.3:29500\nbash: torchrun: command not found",
        "Launching on 2 nodes\n/bin/sh: 1: deepspeed: not found",
        "sudo: accelerate: command not found",
        "zsh: command not found: horovodrun",
        # bash in a Chinese (mainland and Taiwan) or Russian locale
        "bash: torchrun: 未找到命令",
        "bash: mpirun\uff1a指令找不到",  # the Taiwanese translation's colon is full-width
        "bash: torchrun: команда не найдена",
    ],
)
def test_a_command_the_job_runs_missing_from_its_path_is_the_job_s(text: str) -> None:
    """The shell (or sudo) could not find the launcher or program the job runs on the PATH it runs with: the image or
    the command line, the same on a retry."""
    v = _verdict(text)
    assert (v.pod, v.category, v.retryable) == ("w-1", "user_code", False)
    assert v.confidence < PERMANENT_CONFIDENCE


def test_an_optional_tool_s_probe_not_found_before_a_peer_s_timeout_is_that_timeout() -> None:
    """A healthy run's probe for a monitoring tool the image lacks prints the same words; the member's timeout after
    it says what ended it."""
    probe = "step 900 loss 0.8\n/bin/sh: nvidia-smi: command not found\n" + WATCHDOG.format(r=0)
    f = assess(member("w-0", 0, probe))
    assert (f.role, f.secondary) == ("secondary", "timeout")


@pytest.mark.parametrize("word", ["已杀死", "Убит", "Tué", "Abgebrochen (Killed)", "Ucciso", "Morto (Killed)"])
def test_the_shell_s_killed_in_another_locale_is_the_host_s_memory(word: str) -> None:
    """bash's word for its job's SIGKILL in a translated locale, on a line of its own as in English: the kernel's OOM
    killer, as the English word is read."""
    v = _verdict(f"Writing metrics: /runs/exp7/metrics.jsonl\nepoch 4 step 1200 loss 0.31\n{word}")
    assert (v.pod, v.category, v.retryable) == ("w-1", "host_oom", False)
