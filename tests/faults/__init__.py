"""The fault tier: the daemon under kill -9, API outages, damaged state, a full disk, faulty
delegates, fuzzed and hostile input (issue 6). Needs root, like tests/e2e."""
