"""netattach: multi-network pods for Kubernetes, a CNI delegating plugin."""

__version__ = "0.1.0"
