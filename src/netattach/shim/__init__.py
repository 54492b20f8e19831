"""The shim: the executable the container runtime runs as the `netattach` CNI plugin (see `main`).

Kept empty so that importing the package costs nothing: the shim runs on every pod's critical path.
"""
