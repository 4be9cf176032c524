"""`podmortem analyze`: the engine over an incident bundle copied out of a cluster (bundle -> report)."""
