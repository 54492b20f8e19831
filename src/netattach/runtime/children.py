"""How asyncio learns that a delegate exited: a pidfd in the event loop, not a thread per child.

Python 3.11's default child watcher starts a thread for every child to block in `waitpid`; with
a few delegates per pod and hundreds of pods at a node's start, that is a thread start and a
cross-thread wake-up per delegate. A pidfd (Linux 5.3) is readable once its process exits, so
the loop itself notices. From Python 3.12 asyncio does this by itself.
"""

import asyncio
import os
import sys
import warnings


def watch_children_with_pidfds() -> bool:
    """Make asyncio reap children through pidfds when this kernel and Python can; True if so.

    Call it from the coroutine that runs the process's one event loop (the daemon's, the thin
    plugin's), before the first child: the watcher is process-wide and bound to that loop.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False  # a kernel before 5.3, or a seccomp profile that refuses it
    watcher = asyncio.PidfdChildWatcher()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(watcher)
    watcher.attach_loop(asyncio.get_running_loop())
    return True
