"""Composition root: settings, the orchestrator, the socket server, readiness, metrics."""
