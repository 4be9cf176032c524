"""Local runs without a cluster: the torchrun harness, its training workload, the clock shim and the demo.

Imported by nothing else in the package (an import-linter contract keeps it so): it is the test bench
and the demo, not the product.
"""
