"""The aggregator's Kubernetes side: the client wrapper (the only module importing `kubernetes`), job
identity and size, the pod watch feeding the incident book, and the publishers writing verdicts back."""
