"""The pure core: what a failure *is* and how the root cause is decided.

model (the plain data), errorfile (torch's error-file contract), podstatus (a Pod object -> facts),
rules and engine (classification and the decision). Nothing here does I/O on its own behalf, speaks
gRPC or imports the Kubernetes client: the sidecar, the aggregator and `podmortem analyze` all share it.
"""
