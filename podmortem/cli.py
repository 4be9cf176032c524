"""`podmortem` — one command, five jobs.

    podmortem sidecar      run next to a training container: watch its error file and pod, stream events
    podmortem aggregator   collect events from every sidecar, decide each incident's root cause, publish it
    podmortem analyze DIR  decide offline from a copied incident bundle (error files, pod JSON, logs)
    podmortem demo         run a small local training job with an injected fault, end to end, no cluster
    podmortem policy KIND  print the retry policy (YAML) that makes podmortem's pod conditions act

Only the chosen subcommand's module is imported: the sidecar runs in every training pod, and its
memory must not pay for the aggregator's or the engine's imports (nor the kubernetes client's).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, cast

from podmortem import __version__
from podmortem.local.faults import FAULTS
from podmortem.settings import HelpFormatter, Setting, add_arguments, is_true, read


class _Command(Protocol):
    def build_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, ns: argparse.Namespace) -> int: ...


ANALYZE_SETTINGS: tuple[Setting, ...] = (
    Setting("json", "--json", "PODMORTEM_ANALYZE_JSON", "print one JSON object instead of the report", switch=True),
    Setting("rules", "--rules", "PODMORTEM_RULES", "rules file extending the classification rules", shown="built-in"),
    Setting(
        "html",
        "--html",
        "PODMORTEM_ANALYZE_HTML",
        "also write the incident page to this file: one self-contained HTML file (timeline, evidence, victims)",
    ),
)
DEMO_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "fault",
        "--fault",
        "PODMORTEM_DEMO_FAULT",
        "what goes wrong (below)",
        default="exception",
        choices=tuple(FAULTS),
    ),
    Setting("pods", "--pods", "PODMORTEM_DEMO_PODS", "number of pods, i.e. torchrun nodes (>= 2)", default="3"),
    Setting("fail_rank", "--fail-rank", "PODMORTEM_DEMO_FAIL_RANK", "node rank made to fail", shown="the last"),
    Setting(
        "nproc", "--nproc", "PODMORTEM_DEMO_NPROC", "worker processes per pod (torchrun --nproc-per-node)", default="1"
    ),
    Setting(
        "keep",
        "--keep",
        "PODMORTEM_DEMO_KEEP",
        "run in this new directory and keep it: an incident bundle for 'podmortem analyze DIR', with the "
        "sidecars', workers' and aggregator's logs, the verdict file and the incident page (DIR/incident.html)",
        shown="a temporary directory, removed",
    ),
)


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return 2


def _analyze_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bundle",
        metavar="DIR",
        help="incident bundle: incident.json + pods/<pod>/{pod.json,error.json,log.txt,captures.json} "
        "(docs/engine.md, 'Gathering a bundle by hand'; 'podmortem demo --keep DIR' makes one)",
    )
    add_arguments(parser, ANALYZE_SETTINGS, "analyze settings")


def _analyze_run(ns: argparse.Namespace) -> int:
    from podmortem.offline import analyze

    raw = read(ANALYZE_SETTINGS, None, ns)
    return analyze.main(
        ns.bundle,
        as_json=is_true(raw.get("json")),
        rules_path=raw.get("rules") or None,
        html_path=raw.get("html") or None,
    )


def _demo_parser(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, DEMO_SETTINGS, "demo settings")
    parser.epilog = "faults (pod X, node rank N, ...):\n" + "\n".join(
        f"  {name:<10} {fault.text} -> {fault.category}" for name, fault in FAULTS.items()
    )
    parser.formatter_class = _RawEpilogFormatter


class _RawEpilogFormatter(HelpFormatter):
    """Keeps the epilog's lines (one per fault) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def _demo_run(ns: argparse.Namespace) -> int:
    from podmortem.local import demo

    raw = read(DEMO_SETTINGS, None, ns)
    numbers: dict[str, int | None] = {}
    for s in DEMO_SETTINGS:
        if s.dest in ("pods", "fail_rank", "nproc"):
            text = raw.get(s.dest, "")
            try:
                numbers[s.dest] = int(text) if text else None
            except ValueError:
                return _fail("podmortem demo", f"{s.name} = {text!r} is not a whole number")
    if raw["fault"] not in FAULTS:
        return _fail("podmortem demo", f"{DEMO_SETTINGS[0].name} = {raw['fault']!r} is not one of {', '.join(FAULTS)}")
    keep = raw.get("keep") or None
    page = None
    if keep:
        from podmortem.offline.analyze import page_beside

        page = page_beside
    return demo.main(
        fault=raw["fault"],
        pods=numbers["pods"] or 0,
        fail_rank=numbers["fail_rank"],
        nproc=numbers["nproc"] or 0,
        keep=keep,
        page=page,
    )


def _policy_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind", choices=("job", "jobset", "trainjob", "pytorchjob"), help="the object the fragment goes into"
    )
    parser.add_argument(
        "--replicated-job",
        action="append",
        metavar="NAME",
        help="jobset/trainjob: a replicatedJob to give the pod rules, repeatable "
        "(default: workers for jobset, node for trainjob)",
    )
    parser.add_argument(
        "--max-restarts", type=int, default=None, help="jobset/trainjob: failurePolicy.maxRestarts (default 3)"
    )


def _policy_run(ns: argparse.Namespace) -> int:
    from podmortem.k8s import policy

    if ns.kind == "pytorchjob":
        print(policy.PYTORCHJOB_NOTE, file=sys.stderr)
        return 2
    try:
        text = policy.render(
            ns.kind,
            tuple(ns.replicated_job or ()),
            policy.DEFAULT_MAX_RESTARTS if ns.max_restarts is None else ns.max_restarts,
        )
    except ValueError as exc:
        print(f"podmortem policy: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


_LOCAL: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "analyze": (_analyze_parser, _analyze_run),
    "demo": (_demo_parser, _demo_run),
    "policy": (_policy_parser, _policy_run),
}
_MODULES = {"sidecar": "podmortem.sidecar.running", "aggregator": "podmortem.aggregator.running"}
_MODULES["webhook"] = "podmortem.webhook.server"
_HELP = {
    "sidecar": "run beside a training container: watch its error file and pod, stream events to the aggregator",
    "aggregator": "collect events from all sidecars, decide each incident's root cause, publish the verdict",
    "webhook": "inject the sidecar into training pods (Kubernetes mutating admission webhook, HTTPS)",
    "analyze": "decide offline from an incident bundle (copied error files, pod JSON, log tails)",
    "demo": "run a local multi-pod training job with an injected fault and print the verdict (no cluster)",
    "policy": "print the podFailurePolicy / JobSet failurePolicy that makes podmortem's pod conditions act",
}


def _selected(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in _HELP else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="podmortem",
        description="Which pod of a failed distributed PyTorch job failed first, and why.",
        epilog="Run 'podmortem <command> --help' for a command's options. Start with 'podmortem demo'.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"podmortem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    chosen = _selected(argv)
    runner: Callable[[argparse.Namespace], int] | None = None
    for name, text in _HELP.items():
        cmd_parser = sub.add_parser(name, help=text, description=text, formatter_class=HelpFormatter)
        if name != chosen:
            continue
        if name in _LOCAL:
            build, runner = _LOCAL[name]
            build(cmd_parser)
        else:
            module = cast(_Command, importlib.import_module(_MODULES[name]))
            module.build_parser(cmd_parser)
            runner = module.run
    ns = parser.parse_args(argv)
    if runner is None:
        parser.print_help()
        return 2
    try:
        return runner(ns)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
