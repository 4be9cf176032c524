"""A verdict's signature: what makes two attempts of a job "the same failure".

A retry is worth making only if it may meet something else than the last attempt met. Two verdicts have
the same signature when a retry would meet the same failure again, although everything that changes from
run to run changed: pids, addresses and ports, pod and host names of recreated pods, timestamps, tensor
sizes of another batch, temporary paths, hex ids. The signature is made of:

* the category;
* the exception type;
* the message, normalised (`normalise`, below);
* the culprit's frame where known: the innermost `File "...", line N, in fn` of the root's traceback, kept
  as `file.py:fn` (the file's base name: its directory is a site-packages or a temporary path that moves;
  the line number alone says nothing once the code changed, and the function does);
* for `hang`, the collective the ranks were stuck in (the verdict's own `hang.op`/`hang.frame` when the
  engine gives them, else the operation named in the messages: NCCL's `OpType=ALLREDUCE`, gloo's
  `allreduce`) and the stuck rank: a hang that moved to another rank is another hang;
* for `hardware` and `node_lost`, the node: the same fault on another node is not a repeat (that is the
  bad-node record's job, `aggregator.kube.nodes`).

What `normalise` replaces, and why each is incidental (the table in docs/retries.md shows examples):

* times (ISO, `HH:MM:SS`, glog headers) -> `<time>`: the clock of the run;
* IPv4 and IPv6 addresses with their port, `[host]:port` -> `<addr>`: pods get new IPs every attempt;
* `pid 2630`, `pid: 2630`, `process 2630` -> `pid <pid>`: a new process every run;
* `0x7f3a...` and hex runs of 8+ digits (uuids, hashes, NCCL comm ids) -> `<hex>`;
* `/tmp/...`, `/var/folders/...`, `torchelastic_xxxx` -> `<tmp>`: temporary directories;
* `[32, 512]`, `(4, 1024, 768)` -> `[<shape>]`: the batch that happened to fail;
* `rank 3`, `[rank3]:`, `local_rank: 5` -> `rank <r>`: the same bug on another rank is the same bug
  (a hang's stuck rank is kept apart, above);
* any other number (`2.00 GiB`, `GPU 4`, `at step 16`, `Target 6`, `8x12`, `-1e-05`) -> `<n>`: sizes,
  device indices, steps and values of the batch that happened to fail;
* the incident's own pod and node names -> `<name>`: a recreated pod has a new name.

Kept as is, because they identify the failure: a number that names a code (`exit code 2`, `exitcode: -9`,
`signal 11`, `Xid 79`, `errno 111`, `NCCL error 12`, `status 3`), words, identifiers with digits in them
(`float16`, `sm_80`), file names, exception types. A number inside a dotted name (`layer.3.weight`) stays
too: it names a parameter.

The signature is `<category>:<16 hex digits>` (a SHA-256 of the parts), short enough for a pod
condition's message and an annotation. Pure: text in, text out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from podmortem.core.model import Verdict

MAX_NORMALISED = 400  # of the message, after normalisation (the part a person reads in `explain`)

_SUBS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, flags), r)
    for p, r, flags in (
        # glog header: severity+MMDD time thread file:line]
        (r"\b[IWEF]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)? +\d+ [^\s\]]*\]", "<time>", 0),
        (r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<time>", 0),
        (r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<time>", 0),
        (r"(?:/tmp|/var/folders|/private/var)/\S*|\btorchelastic_\w+|\btmp[a-z0-9_]{6,}\b", "<tmp>", 0),
        (r"\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\](?::\d+)?", "<addr>", 0),  # [::1]:29500, [fe80::1]
        (r"\[[\w.-]+\]:\d+", "<addr>", 0),  # [host]:port (gloo)
        (  # fe80::1%ib0<0>, and the full 8-group form
            r"(?<![\w:])(?:[0-9a-fA-F]{1,4}::[0-9a-fA-F:]*[0-9a-fA-F]|(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4})"
            r"(?:%\w+)?(?:<\d+>)?",
            "<addr>",
            0,
        ),
        (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "<addr>", 0),
        (r"\b(pid|process|PID)\s*[:=]?\s*\d+", r"\1 <pid>", 0),
        (r"\b0x[0-9a-fA-F]+\b", "<hex>", 0),
        (r"\b(?=[0-9a-fA-F-]*\d)(?=[0-9a-fA-F-]*[a-fA-F])[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*\b", "<hex>", 0),
        (r"\[rank\s*\d+\]", "[rank <r>]", re.IGNORECASE),
        (r"\b((?:local_|global_|node_)?rank)(\s*[:=]?\s*)\d+", r"\1\2<r>", re.IGNORECASE),
        (r"[\[(]\s*\d+(?:\s*,\s*\d+)+\s*,?\s*[\])]", "[<shape>]", 0),
        # A number that names a code stays (exit code 2, signal 11, Xid 79, errno 111, NCCL error 12).
        (r"\b((?:code|signal|xid|errno|error|status|exitcode)\s*[:=]?\s*-?)(\d+)", "\\1\ue000\\2", re.IGNORECASE),
        (r"(?<![\w\ue000.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:x\d+)*(?![\d])", "<n>", re.IGNORECASE),
        ("\ue000", "", 0),
    )
)
_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')
_OP = (
    re.compile(r"OpType=(\w+)"),
    re.compile(
        r"\b(all_?reduce|all_?gather(?:_into_tensor)?|reduce_?scatter(?:_tensor)?|broadcast|barrier|"
        r"all_?to_?all|send|recv|reduce|gather|scatter)\b",
        re.IGNORECASE,
    ),
)
_NODE_BOUND = frozenset({"hardware", "node_lost"})


def normalise(text: str, names: Iterable[str] = ()) -> str:
    """`text` with what changes from run to run replaced (the table in the module docstring), whitespace
    collapsed, bounded to MAX_NORMALISED. `names`: pod and node names of the incident, each replaced by
    `<name>` (longest first, so a pod named after its node is not half-replaced)."""
    out = text
    for name in sorted({n for n in names if len(n) >= 3 and n in text}, key=len, reverse=True):
        out = out.replace(name, "<name>")
    for pattern, repl in _SUBS:
        out = pattern.sub(repl, out)
    return " ".join(out.split())[:MAX_NORMALISED]


def frame_of(traceback: str) -> str:
    """The innermost frame of a Python traceback as `file.py:function` ("" when it names none)."""
    found = _FRAME.findall(traceback or "")
    if not found:
        return ""
    path, function = found[-1]
    return f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{function}"


def collective_of(texts: Iterable[str]) -> str:
    """The collective operation the first of `texts` naming one names, lower case without `_` ("" if none)."""
    texts = list(texts)
    for pattern in _OP:
        for text in texts:
            found = pattern.search(text or "")
            if found:
                return found.group(1).lower().replace("_", "")
    return ""


@dataclass(frozen=True)
class Parts:
    """What a signature is made of, for people (`kubectl podmortem explain`) and tests."""

    category: str
    exception_type: str
    message: str
    frame: str
    op: str = ""
    rank: str = ""
    node: str = ""

    def digest(self) -> str:
        fields = (self.category, self.exception_type, self.message, self.frame, self.op, self.rank, self.node)
        return f"{self.category}:{hashlib.sha256(chr(31).join(fields).encode()).hexdigest()[:16]}"


def parts(verdict: Verdict, traceback: str = "", names: Iterable[str] = ()) -> Parts:
    """The parts of `verdict`'s signature. `traceback`: the root's own (its error file's), where known;
    `names`: the incident's pod and node names (`normalise`)."""
    category = verdict.category or ""
    names = tuple(names)
    hang = getattr(verdict, "hang", None)  # the engine's hang location, where it gives one
    frame = str(getattr(hang, "frame", "") or "") or frame_of(traceback)
    op = rank = ""
    if category == "hang":
        op = str(getattr(hang, "op", "") or "") or collective_of(
            [verdict.message, *verdict.evidence, *(s.reason for s in verdict.secondary[:8])]
        )
        stuck = verdict.global_rank if verdict.global_rank is not None else verdict.rank
        rank = "" if stuck is None else str(stuck)
    return Parts(
        category=category,
        exception_type=verdict.exception_type,
        message=normalise(verdict.message, names),
        frame=frame,
        op=op.lower().replace("_", ""),
        rank=rank,
        node=verdict.node if category in _NODE_BOUND else "",
    )


def signature(verdict: Verdict, traceback: str = "", names: Iterable[str] = ()) -> str:
    """`<category>:<16 hex>`; "" for a verdict with no root cause (nothing to repeat)."""
    if verdict.pod is None or verdict.category is None:
        return ""
    return parts(verdict, traceback, names).digest()
