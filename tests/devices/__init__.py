"""The kubelet's device APIs for tests: PodResources (a stand-in and a client), a device plugin."""
