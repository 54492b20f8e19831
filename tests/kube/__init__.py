"""The Kubernetes tier: an in-repo fake API server and the tests of the Kubernetes feed.

`fake_api.FakeKubeApi` is a real HTTP server on 127.0.0.1 that behaves like the Kubernetes API
server for the resources netattach uses. The fixtures in `conftest.py` start it, or, when
`NETATTACH_TEST_KUBECONFIG` names a kubeconfig file, hand the same tests a real API server
(`real_api.RealKubeApi`). See README.md in this directory.
"""
