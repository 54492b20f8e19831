"""What the kubelet-side stand-ins share: serving inside a `with` block."""

from __future__ import annotations

from typing import Self


class Served:
    """A stand-in that serves between `start()` and `stop()`. In a `with` block it starts, waits
    until it is of use (`wait_ready`), and stops on the way out; a start that fails halfway is
    stopped before the failure goes on."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def wait_ready(self) -> None:
        """Return once the started stand-in can be used: at once, unless a stand-in says so."""

    def __enter__(self) -> Self:
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
