"""Shared test configuration: requirement markers, the netns-skip policy, netns fixtures."""

pytest_plugins = [
    "pytester",
    "tests.requirements_report",
    "tests.netns_policy",
    "tests.netns_fixtures",
]
