"""podmortem: which pod of a failed distributed PyTorch job failed first, and why."""

__version__ = "0.1.0"
