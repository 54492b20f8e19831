"""At most `max_concurrent` plugin processes at once; the rest queue and still finish."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from netattach.cni import conf
from netattach.runtime import chain
from tests.unit.fake_plugins import FakePlugins


class SlowPlugins(FakePlugins):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, ["bridge"])
        self.now = 0
        self.peak = 0
        self.before_run = self.count

    async def count(self, path: Path, env: Mapping[str, str]) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.02)
        self.now -= 1


def test_plugin_executions_are_bounded_and_the_rest_wait(tmp_path: Path) -> None:
    plugins = SlowPlugins(tmp_path / "bin")
    runtime = chain.Runtime(
        path=[str(plugins.directory)], cache_dir=tmp_path / "c", executor=plugins, max_concurrent=2
    )
    net = conf.parse_config_list(
        {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]}
    )
    seen_waiting: list[int] = []

    async def burst() -> list[object]:
        async def watch() -> None:
            for _ in range(20):
                seen_waiting.append(runtime.invoker.waiting)
                await asyncio.sleep(0.005)

        adds = [
            runtime.add_network_list(
                net, chain.RuntimeConf(container_id=f"c{i}", ifname="eth0", netns="/x")
            )
            for i in range(10)
        ]
        results = await asyncio.gather(*adds, watch())
        return list(results[:-1])

    results = asyncio.run(burst())
    assert plugins.peak == 2
    assert max(seen_waiting) >= 1
    assert runtime.invoker.waiting == 0
    assert runtime.invoker.running == 0
    assert len(results) == 10
    assert sorted(c.env["CNI_CONTAINERID"] for c in plugins.calls) == sorted(
        f"c{i}" for i in range(10)
    )
