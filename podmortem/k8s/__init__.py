"""Kubernetes plumbing shared by the sidecar and the aggregator, with no Kubernetes client.

Two transports talk to the API server — the aggregator through the official client
(`podmortem.aggregator.kube.client`), the sidecar over raw HTTP (`podmortem.sidecar.apiserver`, because
the client costs ~25 MiB of RSS in every training pod) — but what surrounds a request is the same and
lives here once: the error hierarchy and its translation from HTTP status (errors), exponential backoff
with jitter (backoff), the list -> watch -> 410 Gone -> re-list loop (listwatch), and API paths and
object helpers (objects). Pure: no I/O but the awaits the caller hands in.
"""
