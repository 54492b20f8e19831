"""The CNI vocabulary: constants, errors, versions, environment, configs and results.

Standard library only: the shim imports parts of this package on every pod's critical path.
"""
