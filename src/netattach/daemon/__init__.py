"""The node daemon's process: the composition root (service), the socket server, metrics and
health, readiness and install, the policy loop, introspection and the hot-plug loop. The pod
operations it serves are netattach.pods', the thin plugin's too."""
