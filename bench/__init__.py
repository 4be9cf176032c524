"""Benchmarks that print figures; run each from the repository root as `python -m bench.NAME` (README, "Benchmarks")."""
