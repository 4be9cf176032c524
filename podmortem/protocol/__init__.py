"""The wire between sidecar and aggregator: the generated gRPC code (v1/) and the conversions between
the core's facts and the contract's events (wire). Depends on the core only."""
