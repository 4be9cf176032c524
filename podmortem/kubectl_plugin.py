"""`kubectl podmortem explain <kind>/<name>`: the verdict on a job or pod, the way `kubectl describe` shows
things; `kubectl podmortem bundle <kind>/<name> DIR`: the job's incident bundle, for `podmortem analyze`.

The aggregator writes its verdict into the cluster (`podmortem.io/summary` and `podmortem.io/verdict`
annotations on the job and on the root-cause pod, a `PodmortemRootCause` condition on the job); this
plugin reads it back for a person at a terminal. It is installed as the console script
`kubectl-podmortem`, which kubectl finds on PATH and runs for `kubectl podmortem ...`.

It reads through the `kubectl` binary itself (`kubectl get -o json`; `$KUBECTL` overrides which), so
it uses exactly the user's kubeconfig, context, credentials plugins and flags — and needs no
Kubernetes client library. Asked about a pod that carries no verdict, it follows the pod's controller
ownerReference to its job and explains that. It then lists the job's pods (by the label each kind puts on
them) and shows each one's `podmortem.io/*` condition: Victim, PermanentFailure, RetryableFailure, or
none — what a `podFailurePolicy` acted on.

Under the verdict it shows the root pod's node's hardware-fault record (`podmortem.io/hardware-faults`,
and the `podmortem.io/SuspectHardware` condition) when podmortem keeps one there.

Exit status: 0 with a verdict, 1 when the object has none (yet), 2 on usage or kubectl errors.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podmortem import settings
from podmortem.core.capturefile import captures_by_pod
from podmortem.core.names import (
    BATCH_JOB_NAME,
    CONDITION_TYPES,
    CONTAINER_ANNOTATION,
    HARDWARE_FAULTS_ANNOTATION,
    JOBSET_NAME,
    KUBEFLOW_JOB,
    ROOT_CAUSE_CONDITION,
    SUMMARY_ANNOTATION,
    SUSPECT_HARDWARE_CONDITION,
    VERDICT_ANNOTATION,
)
from podmortem.k8s.objects import annotations_of, metadata_of, spec_of, status_of
from podmortem.settings import Setting


class PluginError(Exception):
    pass


def _field(label: str, value: Any, indent: int = 0) -> str:
    text = "<none>" if value is None or value == "" else str(value).lower() if isinstance(value, bool) else str(value)
    return f"{' ' * indent}{label + ':':<{16 - indent}}{text}"


def pod_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's podmortem.io/* condition, if it carries one."""
    for c in status_of(pod).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") in CONDITION_TYPES and c.get("status") == "True":
            return c
    return None


def pod_lines(pods: Sequence[dict[str, Any]]) -> list[str]:
    """'Pod Conditions:' with each pod's podmortem condition (or <none>), by name (pure)."""
    if not pods:
        return []
    named = sorted(((str(metadata_of(p).get("name", "")), pod_condition(p)) for p in pods), key=_first)
    width = max(len(name) for name, _ in named)
    lines = ["Pod Conditions:"]
    for name, c in named:
        if c is None:
            lines.append(f"  {name:<{width}}  <none>")
        else:
            kind = str(c.get("type", "")).rpartition("/")[2]
            lines.append(
                f"  {name:<{width}}  {kind} ({c.get('reason')}, {c.get('lastTransitionTime')}): {c.get('message')}"
            )
    return lines


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]


def render(obj: dict[str, Any], pods: Sequence[dict[str, Any]] = ()) -> str | None:
    """The describe-style text for an object carrying a verdict; None when it carries none (pure). With
    `pods` (the job's), each one's podmortem condition."""
    annotations = annotations_of(obj)
    if VERDICT_ANNOTATION not in annotations and SUMMARY_ANNOTATION not in annotations:
        return None
    meta = metadata_of(obj)
    try:  # anyone who may edit the object may have edited the annotation: show what can be read
        loaded = json.loads(annotations.get(VERDICT_ANNOTATION, "{}"))
    except (ValueError, RecursionError):
        loaded = {}
    doc: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
    lines = [
        _field("Name", meta.get("name")),
        _field("Namespace", meta.get("namespace")),
        _field("Kind", obj.get("kind")),
        _field("Verdict", annotations.get(SUMMARY_ANNOTATION) or doc.get("summary")),
        "Root Cause:",
        _field("Pod", doc.get("pod"), 2),
        _field("Rank", doc.get("rank"), 2),
        _field("Node", doc.get("node"), 2),
        _field("Category", doc.get("category"), 2),
        _field("Retryable", doc.get("retryable"), 2),
        _field("Exception", doc.get("exceptionType"), 2),
        _field("Message", doc.get("message"), 2),
        _field("Confidence", doc.get("confidence"), 2),
    ]
    evidence = doc.get("evidence") or []
    lines.append("Evidence:" + ("" if evidence else "      <none>"))
    lines += [f"  - {e}" for e in evidence]
    secondary = doc.get("secondary") or []
    if secondary:
        lines.append("Secondary Failures:")
        width = max(len(str(s.get("pod", ""))) for s in secondary)
        lines += [f"  {s.get('pod', '')!s:<{width}}  {s.get('reason', '')}" for s in secondary]
    lines += _repeat_lines(doc)
    incident = doc.get("incidentId")
    if incident:
        state = "final" if doc.get("final") else "may still be revised"
        lines.append(_field("Incident", f"{incident} (revision {doc.get('revision')}, {state})"))
    lines.append(_field("Decided At", doc.get("decidedAt")))
    for c in status_of(obj).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ROOT_CAUSE_CONDITION:
            lines.append(_field("Condition", f"{ROOT_CAUSE_CONDITION}={c.get('status')} ({c.get('reason')})"))
    lines += pod_lines(pods)
    return "\n".join(lines) + "\n"


def _repeat_lines(doc: dict[str, Any]) -> list[str]:
    """The job's attempts: one line saying whether this failure repeats the attempts before it, then one
    per attempt (newest first), so that "third time, same error" needs no digging."""
    history = [a for a in doc.get("attemptHistory") or [] if isinstance(a, dict)]
    signature, repeats = doc.get("signature"), doc.get("repeats")
    if not history and not signature:
        return []
    if not signature:
        head = "no root cause to compare with the attempts before"
    elif isinstance(repeats, int) and repeats > 1:
        head = f"same failure on {repeats} attempts in a row (signature {signature})"
    else:
        head = f"not a repeat of the attempt before (signature {signature})"
    lines = [_field("Repeats", head), "Attempts:"]
    for a in history:
        name = a.get("attempt") or "first run"
        lines.append(f"  {name!s:<8}  {a.get('category')!s:<10}  {a.get('signature')}  {a.get('decidedAt')}")
    return lines


def render_node(node: dict[str, Any]) -> str | None:
    """The hardware-fault record podmortem keeps on a node (pure); None when it has none."""
    raw = annotations_of(node).get(HARDWARE_FAULTS_ANNOTATION)
    suspect = next(
        (c for c in status_of(node).get("conditions") or []
         if isinstance(c, dict) and c.get("type") == SUSPECT_HARDWARE_CONDITION),
        None,
    )  # fmt: skip
    if raw is None and suspect is None:
        return None
    try:
        loaded = json.loads(raw or "[]")
    except (ValueError, RecursionError):
        loaded = []
    faults = [f for f in loaded if isinstance(f, dict)] if isinstance(loaded, list) else []
    name = metadata_of(node).get("name")
    lines = [f"Node {name} Hardware Faults:" + ("" if faults else " <none>")]
    for f in faults:
        lines.append(f"  {f.get('time')}  {f.get('job')}  pod {f.get('pod')}")
        lines += [f"      {e}" for e in f.get("evidence") or []]
    if suspect is not None:
        lines.append(_field("Suspect", f"{suspect.get('status')} ({suspect.get('reason')}): {suspect.get('message')}"))
    return "\n".join(lines) + "\n"


# -n, --kubeconfig and --context are kubectl's own flags, handed to it (kubectl reads KUBECONFIG itself).
SETTINGS = (Setting("kubectl", "--kubectl", "KUBECTL", "the kubectl binary to run", default="kubectl"),)
MAX_OWNER_HOPS = 3  # pod -> batch Job -> JobSet -> TrainJob


def _owner_target(obj: dict[str, Any]) -> str | None:
    """'<kind>.<group>/<name>' of an object's controller, for kubectl."""
    for ref in metadata_of(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            kind = str(ref.get("kind", "")).lower()
            return f"{kind}.{group}/{ref.get('name')}" if group else f"{kind}/{ref.get('name')}"
    return None


class Kubectl:
    def __init__(self, binary: str, flags: Sequence[str]) -> None:
        self.binary = binary
        self.flags = list(flags)

    def get(self, target: str) -> dict[str, Any]:
        cmd = [self.binary, *self.flags, "get", target, "-o", "json"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PluginError(f"cannot run {self.binary}: {exc}") from exc
        if done.returncode != 0:
            # kubectl's own message starts with "error: ", as ours do: say it once.
            raise PluginError(done.stderr.strip().removeprefix("error: ") or f"{' '.join(cmd)} failed")
        obj = json.loads(done.stdout)
        if not isinstance(obj, dict) or obj.get("kind", "").endswith("List"):
            raise PluginError(f"{target}: name one object, as <kind>/<name>")
        return obj

    def pods_of(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The job's pods (by its kind's pod label); [] when its kind is not known or they cannot be listed."""
        label = POD_LABELS.get(str(job.get("kind", "")))
        name = metadata_of(job).get("name")
        text = self.text("get", "pods", "-l", f"{label}={name}", "-o", "json") if label and name else None
        try:
            listed = json.loads(text) if text else {}
        except ValueError:
            return []
        items = listed.get("items") if isinstance(listed, dict) else None
        return [p for p in items or [] if isinstance(p, dict)]

    def text(self, *args: str) -> str | None:
        """The output of `kubectl <flags> <args>`; None when kubectl fails (the caller goes without)."""
        try:
            done = subprocess.run([self.binary, *self.flags, *args], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None


# How a job's pods are labelled, per kind (the labels the aggregator's pod watch selects by).
POD_LABELS = {
    "PyTorchJob": KUBEFLOW_JOB,
    "Job": BATCH_JOB_NAME,
    "JobSet": JOBSET_NAME,
    "TrainJob": JOBSET_NAME,  # a TrainJob's JobSet has its name
}
LOG_LINES = 300
# What each command takes, as kubectl's resource names (singular; a plural or `kind.group` names the same).
JOB_RESOURCES = ("pytorchjob", "job", "jobset", "trainjob")
EXPLAIN_RESOURCES = (*JOB_RESOURCES, "pod", "po")


def target_problem(command: str, target: str) -> str | None:
    """Why `target` is not something `command` works on, before any cluster is asked; None when it is."""
    kind, sep, name = target.partition("/")
    if not sep or not kind or not name:
        return "name the object as <kind>/<name>, e.g. pytorchjob/my-job"
    resource = kind.lower().partition(".")[0]
    takes = EXPLAIN_RESOURCES if command == "explain" else JOB_RESOURCES
    if resource not in takes and not (resource.endswith("s") and resource[:-1] in takes):
        what = "a job or a pod" if command == "explain" else "a job"
        return f"{target}: {command} takes {what} ({', '.join(r for r in takes if r != 'po')}), not a {kind}"
    return None


def _training_container(pod: dict[str, Any]) -> str:
    names = [str(c.get("name", "")) for c in spec_of(pod).get("containers") or [] if isinstance(c, dict)]
    chosen = annotations_of(pod).get(CONTAINER_ANNOTATION)
    if chosen in names:
        return str(chosen)
    return "pytorch" if "pytorch" in names else next((n for n in names if not n.startswith("podmortem")), "")


def _error_file_path(pod: dict[str, Any], container: str) -> str:
    for c in spec_of(pod).get("containers") or []:
        if isinstance(c, dict) and c.get("name") == container:
            for e in c.get("env") or []:
                if isinstance(e, dict) and e.get("name") == "TORCHELASTIC_ERROR_FILE" and e.get("value"):
                    return str(e["value"])
    return ""


def _log_tail(kubectl: Kubectl, pod: dict[str, Any], container: str) -> str | None:
    """The training container's last LOG_LINES lines, of its failed run when it has restarted."""
    name = str(metadata_of(pod).get("name", ""))
    statuses = status_of(pod).get("containerStatuses") or []
    status = next((s for s in statuses if isinstance(s, dict) and s.get("name") == container), {})
    restarted = "running" in (status.get("state") or {}) and status.get("lastState", {}).get("terminated")
    return kubectl.text("logs", name, "-c", container, f"--tail={LOG_LINES}", *(["--previous"] if restarted else []))


def directory_problem(directory: Path) -> str | None:
    """Why a bundle cannot be written to `directory`: only a new or empty one takes a bundle, since pods of
    another job left there would be read as members of this one. None when it can."""
    try:
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            return f"{directory}: not an empty directory; name a new one (nothing was written)"
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc}"
    return None


def verdict_file_captures(path: Path, namespace: str, name: str) -> dict[str, list[dict[str, Any]]]:
    """The captures of an aggregator's verdict file (its `--verdict-dir`), by pod, once the file is known
    to be the verdict of job `namespace`/`name`; PluginError otherwise (nothing is written then)."""
    if path.exists() and not path.is_file():  # a FIFO would block, a directory cannot be read
        raise PluginError(f"--verdict-file {path}: not a regular file")
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise PluginError(f"--verdict-file {path}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, RecursionError):
        raise PluginError(f"--verdict-file {path}: not a JSON verdict file") from None
    incident = doc.get("incident") if isinstance(doc, dict) else None
    job = incident.get("job") if isinstance(incident, dict) else None
    if not isinstance(job, dict):
        raise PluginError(f"--verdict-file {path}: not a verdict file of the aggregator (no incident.job)")
    if (job.get("namespace"), job.get("name")) != (namespace, name):
        raise PluginError(
            f"--verdict-file {path}: the verdict of {job.get('namespace')}/{job.get('name')}, not of {namespace}/{name}"
        )
    return captures_by_pod(doc.get("captures"))


def bundle(kubectl: Kubectl, target: str, directory: Path, verdict_file: Path | None = None) -> tuple[int, int]:
    """Write the incident bundle of a job (`podmortem analyze DIR` reads it: podmortem/offline/bundle.py):
    `incident.json`, and per pod `pod.json`, `log.txt` (the training container's last LOG_LINES lines, of
    its failed run when it has restarted) and `error.json` (the TorchElastic error file, read through the
    sidecar while the pod still runs). The captures of a hang live in the aggregator, and no object of the
    cluster holds them: with `verdict_file` (the aggregator's verdict file of this job), each pod's
    `captures.json` from its `captures`. Returns the number of pods written, and of those with captures."""
    from podmortem.aggregator.kube.jobs import world_size  # pure: a job object's size

    job = kubectl.get(target)
    kind, meta = str(job.get("kind", "")), metadata_of(job)
    label = POD_LABELS.get(kind)
    if label is None:
        raise PluginError(f"{target}: a {kind or 'object'} is not a job kind podmortem knows ({', '.join(POD_LABELS)})")
    listed = kubectl.text("get", "pods", "-l", f"{label}={meta.get('name')}", "-o", "json")
    pods = [p for p in (json.loads(listed).get("items") or []) if isinstance(p, dict)] if listed else []
    if not pods:
        raise PluginError(f"{target}: no pods labelled {label}={meta.get('name')} (gone already?)")
    if (problem := directory_problem(directory)) is not None:
        raise PluginError(problem)
    captures = (
        verdict_file_captures(verdict_file, str(meta.get("namespace", "")), str(meta.get("name", "")))
        if verdict_file
        else {}
    )
    directory.mkdir(parents=True, exist_ok=True)
    ref = {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "kind": kind,
        "uid": meta.get("uid", ""),
    }
    incident = {"job": ref, "world_size": world_size(job) or len(pods)}
    (directory / "incident.json").write_text(json.dumps(incident, indent=2) + "\n")
    for pod in pods:
        name = str(metadata_of(pod).get("name", ""))
        pod_dir = directory / "pods" / name
        pod_dir.mkdir(parents=True, exist_ok=True)
        (pod_dir / "pod.json").write_text(json.dumps(pod, indent=2) + "\n")
        if name in captures:
            (pod_dir / "captures.json").write_text(json.dumps(captures[name], indent=2) + "\n")
        container = _training_container(pod)
        if not container:
            continue
        log = _log_tail(kubectl, pod, container)
        if log:
            (pod_dir / "log.txt").write_text(log)
        path = _error_file_path(pod, container)
        error = kubectl.text("exec", name, "-c", "podmortem-sidecar", "--", "cat", path) if path else None
        if error:
            (pod_dir / "error.json").write_text(error)
    return len(pods), sum(1 for pod in pods if str(metadata_of(pod).get("name", "")) in captures)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl podmortem", description="Why did this training job fail?")
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="show the verdict on a job or pod, e.g. pytorchjob/my-job")
    explain.add_argument("target", help="<kind>/<name>, e.g. pytorchjob/llm, job/ddp, jobset/x, pod/llm-worker-3")
    explain.add_argument("-o", "--output", choices=("describe", "json"), default="describe")
    explain.add_argument(
        "--html",
        metavar="FILE",
        help="also write the incident page to FILE: one self-contained HTML file (the job's pods, the "
        "verdict, what podmortem wrote; the root's log tail)",
    )
    collect = sub.add_parser("bundle", help="copy a job's pods, logs and error files into DIR for 'podmortem analyze'")
    collect.add_argument("target", help="<kind>/<name> of the job, e.g. pytorchjob/llm, job/ddp, jobset/x")
    collect.add_argument("directory", metavar="DIR", help="where to write the bundle (created)")
    collect.add_argument(
        "--verdict-file",
        metavar="FILE",
        help="the aggregator's verdict file of this job (from its --verdict-dir): the stacks and Flight Recorder "
        "state it captured go into each pod's captures.json (no object in the cluster holds them)",
    )
    for command in (explain, collect):
        command.add_argument("-n", "--namespace")
        command.add_argument("--kubeconfig")
        command.add_argument("--context")
        settings.add_arguments(command, SETTINGS, "plugin settings")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = target_problem(args.command, args.target)
    if problem is None and args.command == "bundle":
        problem = directory_problem(Path(args.directory))
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    flags = [f"--{name}={value}" for name in ("namespace", "kubeconfig", "context") if (value := getattr(args, name))]
    kubectl = Kubectl(settings.read(SETTINGS, None, args)["kubectl"] or "kubectl", flags)
    if args.command == "bundle":
        try:
            verdict_file = Path(args.verdict_file) if args.verdict_file else None
            count, captured = bundle(kubectl, args.target, Path(args.directory), verdict_file)
        except (PluginError, OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        with_captures = f" ({captured} with captures)" if verdict_file else ""
        print(f"{count} pod(s) of {args.target}{with_captures} in {args.directory}: podmortem analyze {args.directory}")
        return 0
    try:
        obj = kubectl.get(args.target)
        # The verdict lives on the outermost workload (pod -> batch Job -> JobSet -> TrainJob): follow the
        # controller ownerReferences up until an object carries it.
        hops: list[str] = []
        while render(obj) is None and len(hops) < MAX_OWNER_HOPS and (owner := _owner_target(obj)):
            hops.append(owner)
            obj = kubectl.get(owner)
        note = ""
        if hops:
            via = f", via {' -> '.join(hops[:-1])}" if len(hops) > 1 else ""
            note = f"({args.target} carries no verdict; showing its job {hops[-1]}{via})\n"
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        verdict = annotations_of(obj).get(VERDICT_ANNOTATION)
        if verdict is None:
            return 1
        print(verdict)
        return write_page(kubectl, obj, {}, Path(args.html)) if args.html else 0
    text = render(obj, kubectl.pods_of(obj) if render(obj) is not None else [])
    if text is None:
        print(f"No podmortem verdict on {args.target} (yet).")
        return 1
    sys.stdout.write(note + text)
    node_name = _verdict_node(obj)
    record = None
    node: dict[str, Any] = {}
    if node_name:
        try:  # the user may not read nodes (a cluster-scoped permission): the verdict stands without it
            node = kubectl.get(f"node/{node_name}")
            record = render_node(node)
        except PluginError as exc:  # a node that is gone has no record to show
            record = None if "NotFound" in str(exc) else f"Node {node_name} Hardware Faults: <not readable: {exc}>\n"
        if record:
            sys.stdout.write(record)
    if args.html:
        return write_page(kubectl, obj, node, Path(args.html))
    return 0


def written_to(obj: dict[str, Any], node: dict[str, Any]) -> list[tuple[str, str]]:
    """What podmortem wrote on the job and the root's node, as (where, what) for the page (pure)."""
    meta = metadata_of(obj)
    where = f"{str(obj.get('kind', '')).lower()}/{meta.get('name')}"
    out = [
        (
            where,
            "annotations " + ", ".join(k for k in (SUMMARY_ANNOTATION, VERDICT_ANNOTATION) if k in annotations_of(obj)),
        )
    ]
    for c in status_of(obj).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ROOT_CAUSE_CONDITION:
            out.append((where, f"condition {ROOT_CAUSE_CONDITION}={c.get('status')} ({c.get('reason')})"))
    raw = annotations_of(node).get(HARDWARE_FAULTS_ANNOTATION)
    if raw is not None:
        try:
            count = len(json.loads(raw))
        except (ValueError, TypeError, RecursionError):
            count = 0
        out.append(
            (f"node/{(node.get('metadata') or {}).get('name')}", f"{HARDWARE_FAULTS_ANNOTATION} ({count} record(s))")
        )
    for c in status_of(node).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == SUSPECT_HARDWARE_CONDITION:
            where_node = f"node/{(node.get('metadata') or {}).get('name')}"
            out.append((where_node, f"condition {SUSPECT_HARDWARE_CONDITION}={c.get('status')} ({c.get('reason')})"))
    return out


def write_page(kubectl: Kubectl, obj: dict[str, Any], node: dict[str, Any], path: Path) -> int:
    """Write the incident page of the job `obj` carrying a verdict: its pods as the API has them, the log
    tails of the root and the runner-up, and what podmortem wrote. Returns the exit status."""
    from podmortem.page import cluster
    from podmortem.page.render import render

    try:
        loaded = json.loads(annotations_of(obj).get(VERDICT_ANNOTATION, "{}"))
    except (ValueError, RecursionError):
        loaded = {}
    doc: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
    pods = kubectl.pods_of(obj)
    wanted = {doc.get("pod"), doc.get("runnerUpPod")} - {None}
    logs = {}
    for pod in pods:
        name = metadata_of(pod).get("name")
        container = _training_container(pod) if name in wanted else ""
        if container and (log := _log_tail(kubectl, pod, container)):
            logs[str(name)] = log
    incident = cluster.incident_from_cluster(obj, pods, logs, doc)
    verdict = cluster.verdict_from_annotation(doc)
    if not verdict.get("summary"):
        verdict["summary"] = annotations_of(obj).get(SUMMARY_ANNOTATION, "")
    html = render(incident, verdict, cluster.context_from_annotation(doc, written_to(obj, node)))
    try:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(html, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        print(f"error: cannot write the page {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"incident page written to {path}", file=sys.stderr)
    return 0


def _verdict_node(obj: dict[str, Any]) -> str:
    try:
        doc = json.loads(annotations_of(obj).get(VERDICT_ANNOTATION, "{}"))
    except (ValueError, RecursionError):
        return ""
    return str(doc.get("node") or "") if isinstance(doc, dict) else ""


if __name__ == "__main__":
    sys.exit(main())
