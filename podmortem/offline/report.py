"""Render a verdict as the short report a person reads after a failed job.

First what to act on — which pod failed first, why, and what to do (the verdict's one or two summary
lines) — then how sure podmortem is and the evidence it used, then every other member that failed and
what it died of, so nobody chases the cascade of timeouts and SIGTERMs. Pure text formatting.
"""

from __future__ import annotations

from podmortem.core.model import Incident, Verdict

MAX_EVIDENCE = 8


def _retry_word(retryable: bool | None) -> str:
    if retryable is None:
        return "unknown"
    return "yes" if retryable else "no"


def _hang_lines(verdict: Verdict) -> list[str]:
    """What the captured stacks and Flight Recorder state said (the summary's first line says it in words)."""
    h = verdict.hang
    if h is None:
        return []
    collective = " ".join(
        p
        for p in (
            h.op,
            f"#{h.seq}" if h.seq is not None else "",
            f"(group {h.process_group})" if h.process_group else "",
        )
        if p
    )
    ranks = ", ".join(str(r) for r in h.stuck_ranks)
    out = [
        f"  hang         {h.finding}"
        + (f": rank(s) {ranks}" if ranks else "")
        + (f", {collective}" if collective else "")
    ]
    if h.frame is not None:
        line = f":{h.frame.line}" if h.frame.line is not None else ""
        out.append(f"  stopped at   {h.frame.file}{line} in {h.frame.function}")
    if h.path:
        out.append(f"  captured by  {h.path}")
    return out


def render(incident: Incident, verdict: Verdict) -> str:
    """The human report for one incident."""
    job = incident.job.key if incident.job.namespace else incident.job.name
    lines = [f"podmortem: {job}" + (f" ({incident.job.kind})" if incident.job.kind else "")]
    if verdict.pod is None:
        lines.append(verdict.summary)
        return "\n".join(lines) + "\n"
    lines.append("")
    lines.extend(verdict.summary.splitlines())
    lines.append("")
    detail = [
        f"  root pod     {verdict.pod}",
        f"  category     {verdict.category or 'undetermined'}   retryable: {_retry_word(verdict.retryable)}",
    ]
    if verdict.rank is not None or verdict.node:
        rank = f"node rank {verdict.rank}" if verdict.rank is not None else ""
        gr = verdict.global_rank
        if gr is not None:
            rank += f" (worker rank {gr})" if rank else f"worker rank {gr}"
        detail.append(f"  where        {', '.join(p for p in (rank, verdict.node) if p)}")
    if verdict.exception_type:
        detail.append(f"  exception    {verdict.exception_type}")
    if verdict.message:
        detail.append(f"  message      {verdict.message}")
    detail.extend(_hang_lines(verdict))
    hedge = "   LOW: read as likely, not certain" if verdict.uncertain else ""
    detail.append(f"  confidence   {verdict.confidence:.2f}   (rule {verdict.rule or '-'}){hedge}")
    if verdict.uncertain and verdict.runner_up_pod:
        detail.append(f"  runner-up    {verdict.runner_up_pod} ({verdict.runner_up_category or 'cause unknown'})")
    lines.extend(detail)
    if verdict.evidence:
        lines.append("")
        lines.append("Evidence:")
        lines.extend(f"  - {e}" for e in verdict.evidence[:MAX_EVIDENCE])
        if len(verdict.evidence) > MAX_EVIDENCE:
            lines.append(f"  … {len(verdict.evidence) - MAX_EVIDENCE} more")
    if verdict.secondary:
        lines.append("")
        lines.append(f"Victims ({len(verdict.secondary)}) — failed because of the root, not on their own:")
        width = max(len(s.pod) for s in verdict.secondary)
        for s in verdict.secondary:
            lines.append(f"  {s.pod:<{width}}  {s.reason}")
    missing = verdict.members_missing
    if missing:
        lines.append("")
        pairs = zip(verdict.missing_pods, verdict.missing_ranks, strict=False)  # pods: () when not derivable
        which = [f"{pod} (node rank {rank})" for pod, rank in pairs] or [
            f"node rank {r}" for r in verdict.missing_ranks
        ]
        named = f": {', '.join(which)}" if which else ""
        lines.append(f"Note: {missing} of {incident.world_size} members have not reported{named}.")
    return "\n".join(lines) + "\n"
