import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SidecarMessage(_message.Message):
    __slots__ = ("register", "event", "clock_probe", "clock_estimate", "hold")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CLOCK_PROBE_FIELD_NUMBER: _ClassVar[int]
    CLOCK_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    register: Register
    event: Event
    clock_probe: ClockProbe
    clock_estimate: ClockEstimate
    hold: Hold
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., event: _Optional[_Union[Event, _Mapping]] = ..., clock_probe: _Optional[_Union[ClockProbe, _Mapping]] = ..., clock_estimate: _Optional[_Union[ClockEstimate, _Mapping]] = ..., hold: _Optional[_Union[Hold, _Mapping]] = ...) -> None: ...

class AggregatorMessage(_message.Message):
    __slots__ = ("registered", "ack", "clock_reply", "hold_reply", "capture_request")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CLOCK_REPLY_FIELD_NUMBER: _ClassVar[int]
    HOLD_REPLY_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    ack: Ack
    clock_reply: ClockReply
    hold_reply: HoldReply
    capture_request: CaptureRequest
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., clock_reply: _Optional[_Union[ClockReply, _Mapping]] = ..., hold_reply: _Optional[_Union[HoldReply, _Mapping]] = ..., capture_request: _Optional[_Union[CaptureRequest, _Mapping]] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("namespace", "name", "kind", "uid")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    kind: str
    uid: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("job", "pod", "pod_uid", "node", "replica_type", "replica_index", "rank", "world_size_hint", "attempt", "session_id", "sidecar_version", "pod_ip", "holds", "captures")
    JOB_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_TYPE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INDEX_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_HINT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SIDECAR_VERSION_FIELD_NUMBER: _ClassVar[int]
    POD_IP_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    CAPTURES_FIELD_NUMBER: _ClassVar[int]
    job: JobRef
    pod: str
    pod_uid: str
    node: str
    replica_type: str
    replica_index: int
    rank: int
    world_size_hint: int
    attempt: str
    session_id: str
    sidecar_version: str
    pod_ip: str
    holds: bool
    captures: bool
    def __init__(self, job: _Optional[_Union[JobRef, _Mapping]] = ..., pod: _Optional[str] = ..., pod_uid: _Optional[str] = ..., node: _Optional[str] = ..., replica_type: _Optional[str] = ..., replica_index: _Optional[int] = ..., rank: _Optional[int] = ..., world_size_hint: _Optional[int] = ..., attempt: _Optional[str] = ..., session_id: _Optional[str] = ..., sidecar_version: _Optional[str] = ..., pod_ip: _Optional[str] = ..., holds: _Optional[bool] = ..., captures: _Optional[bool] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("aggregator_id", "holds", "captures")
    AGGREGATOR_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    CAPTURES_FIELD_NUMBER: _ClassVar[int]
    aggregator_id: str
    holds: bool
    captures: bool
    def __init__(self, aggregator_id: _Optional[str] = ..., holds: _Optional[bool] = ..., captures: _Optional[bool] = ...) -> None: ...

class Hold(_message.Message):
    __slots__ = ("seq", "timeout_seconds")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    timeout_seconds: float
    def __init__(self, seq: _Optional[int] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class HoldReply(_message.Message):
    __slots__ = ("seq", "outcome", "condition_type", "detail")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[HoldReply.Outcome]
        WRITTEN: _ClassVar[HoldReply.Outcome]
        NO_CONDITION: _ClassVar[HoldReply.Outcome]
        NOT_WRITTEN: _ClassVar[HoldReply.Outcome]
    OUTCOME_UNSPECIFIED: HoldReply.Outcome
    WRITTEN: HoldReply.Outcome
    NO_CONDITION: HoldReply.Outcome
    NOT_WRITTEN: HoldReply.Outcome
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CONDITION_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    outcome: HoldReply.Outcome
    condition_type: str
    detail: str
    def __init__(self, seq: _Optional[int] = ..., outcome: _Optional[_Union[HoldReply.Outcome, str]] = ..., condition_type: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("id", "wall_time", "monotonic_ns", "error_file", "termination", "condition", "deletion", "log_tail", "activity", "capture")
    ID_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    MONOTONIC_NS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FILE_FIELD_NUMBER: _ClassVar[int]
    TERMINATION_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    DELETION_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    id: str
    wall_time: _timestamp_pb2.Timestamp
    monotonic_ns: int
    error_file: ErrorFile
    termination: Termination
    condition: PodCondition
    deletion: Deletion
    log_tail: LogTail
    activity: Activity
    capture: Capture
    def __init__(self, id: _Optional[str] = ..., wall_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., monotonic_ns: _Optional[int] = ..., error_file: _Optional[_Union[ErrorFile, _Mapping]] = ..., termination: _Optional[_Union[Termination, _Mapping]] = ..., condition: _Optional[_Union[PodCondition, _Mapping]] = ..., deletion: _Optional[_Union[Deletion, _Mapping]] = ..., log_tail: _Optional[_Union[LogTail, _Mapping]] = ..., activity: _Optional[_Union[Activity, _Mapping]] = ..., capture: _Optional[_Union[Capture, _Mapping]] = ...) -> None: ...

class ErrorFile(_message.Message):
    __slots__ = ("message", "exception_type", "traceback", "timestamp", "error_code", "truncated", "size_bytes", "parse_error")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARSE_ERROR_FIELD_NUMBER: _ClassVar[int]
    message: str
    exception_type: str
    traceback: str
    timestamp: int
    error_code: int
    truncated: bool
    size_bytes: int
    parse_error: str
    def __init__(self, message: _Optional[str] = ..., exception_type: _Optional[str] = ..., traceback: _Optional[str] = ..., timestamp: _Optional[int] = ..., error_code: _Optional[int] = ..., truncated: _Optional[bool] = ..., size_bytes: _Optional[int] = ..., parse_error: _Optional[str] = ...) -> None: ...

class Termination(_message.Message):
    __slots__ = ("exit_code", "signal", "reason", "message", "started_at", "finished_at", "restart_count", "container")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: int
    reason: str
    message: str
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    restart_count: int
    container: str
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., restart_count: _Optional[int] = ..., container: _Optional[str] = ...) -> None: ...

class PodCondition(_message.Message):
    __slots__ = ("type", "status", "reason", "message", "last_transition_time")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_TRANSITION_TIME_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: _timestamp_pb2.Timestamp
    def __init__(self, type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., last_transition_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Deletion(_message.Message):
    __slots__ = ("deletion_timestamp", "phase", "reason")
    DELETION_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    deletion_timestamp: _timestamp_pb2.Timestamp
    phase: str
    reason: str
    def __init__(self, deletion_timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., phase: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LogTail(_message.Message):
    __slots__ = ("text", "truncated")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    text: bytes
    truncated: bool
    def __init__(self, text: _Optional[bytes] = ..., truncated: _Optional[bool] = ...) -> None: ...

class Activity(_message.Message):
    __slots__ = ("quiet", "quiet_seconds", "last_progress")
    QUIET_FIELD_NUMBER: _ClassVar[int]
    QUIET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    quiet: bool
    quiet_seconds: float
    last_progress: _timestamp_pb2.Timestamp
    def __init__(self, quiet: _Optional[bool] = ..., quiet_seconds: _Optional[float] = ..., last_progress: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Capture(_message.Message):
    __slots__ = ("request_id", "trigger", "workers", "note")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    trigger: str
    workers: _containers.RepeatedCompositeFieldContainer[WorkerCapture]
    note: str
    def __init__(self, request_id: _Optional[str] = ..., trigger: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[WorkerCapture, _Mapping]]] = ..., note: _Optional[str] = ...) -> None: ...

class WorkerCapture(_message.Message):
    __slots__ = ("local_rank", "global_rank", "path", "stack", "flight_recorder", "note", "pid")
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_RANK_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    FLIGHT_RECORDER_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    local_rank: int
    global_rank: int
    path: str
    stack: str
    flight_recorder: str
    note: str
    pid: int
    def __init__(self, local_rank: _Optional[int] = ..., global_rank: _Optional[int] = ..., path: _Optional[str] = ..., stack: _Optional[str] = ..., flight_recorder: _Optional[str] = ..., note: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class CaptureRequest(_message.Message):
    __slots__ = ("request_id", "trigger", "timeout_seconds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    trigger: str
    timeout_seconds: float
    def __init__(self, request_id: _Optional[str] = ..., trigger: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("event_ids",)
    EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    event_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, event_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ClockProbe(_message.Message):
    __slots__ = ("seq", "t1")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    T1_FIELD_NUMBER: _ClassVar[int]
    seq: int
    t1: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., t1: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ClockReply(_message.Message):
    __slots__ = ("seq", "t1", "t2", "t3")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    T1_FIELD_NUMBER: _ClassVar[int]
    T2_FIELD_NUMBER: _ClassVar[int]
    T3_FIELD_NUMBER: _ClassVar[int]
    seq: int
    t1: _timestamp_pb2.Timestamp
    t2: _timestamp_pb2.Timestamp
    t3: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., t1: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., t2: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., t3: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ClockEstimate(_message.Message):
    __slots__ = ("offset_ns", "round_trip_ns", "samples")
    OFFSET_NS_FIELD_NUMBER: _ClassVar[int]
    ROUND_TRIP_NS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    offset_ns: int
    round_trip_ns: int
    samples: int
    def __init__(self, offset_ns: _Optional[int] = ..., round_trip_ns: _Optional[int] = ..., samples: _Optional[int] = ...) -> None: ...
