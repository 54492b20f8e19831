"""Config lists run as the CNI specification says (RT-LIST, CNI-CHECK, CNI-11).

`Runtime` is netattach's libcni `CNIConfig`: ADD chains `prevResult` through the plugins, CHECK
and DEL reuse the cached result, DEL runs in reverse, STATUS and GC are the 1.1 verbs. Every
call's config is the plugin's raw dict with only the spec's keys injected (`build_plugin_config`).
"""

from __future__ import annotations

import copy
import os
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path

from netattach import loggers
from netattach.cni import conf, errors, result, spec, version
from netattach.runtime import cache, execute, invoke
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from netattach.runtime.memory import MemoryGate

log = loggers.get("netattach.runtime")

DEFAULT_TIMEOUT = 60.0


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class RuntimeConf(NamedTuple):
    """What the runtime knows of one attachment (libcni's RuntimeConf)."""

    container_id: str
    ifname: str
    netns: str = ""
    args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = types.MappingProxyType({})


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class GCAttachment(NamedTuple):
    """An attachment the runtime still wants kept (CNI 1.1 GC)."""

    container_id: str
    ifname: str


def build_plugin_config(
    network: conf.NetworkConfigList,
    plugin: conf.NetworkConfig,
    *,
    prev_result: result.Result | None = None,
    capability_args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON a plugin gets on stdin: its raw dict plus what the spec tells a runtime to add.

    CNI spec "Network Configuration Lists": the list's `name` and `cniVersion` replace the
    plugin's; `runtimeConfig` carries the capability arguments of the capabilities this plugin
    declares, and nothing else; `prevResult` is the previous plugin's result in the list's version.
    """
    config = copy.deepcopy(plugin.raw)
    config["name"] = network.name
    config["cniVersion"] = network.cni_version
    if prev_result is not None:
        from netattach.cni import result_convert  # only with a result to pass on

        config["prevResult"] = result_convert.convert(prev_result, network.cni_version).to_raw()
    runtime_config = {
        capability: value
        for capability, value in (capability_args or {}).items()
        if capability in plugin.capabilities
    }
    if runtime_config:
        config["runtimeConfig"] = runtime_config
    return config


def _key(network: conf.NetworkConfigList, rt: RuntimeConf) -> cache.AttachmentKey:
    return cache.AttachmentKey(
        network_name=network.name, container_id=rt.container_id, ifname=rt.ifname
    )


class Runtime:
    """Runs networks (config lists) for attachments, keeping each attachment's record."""

    def __init__(
        self,
        *,
        path: Sequence[str],
        cache_dir: Path,
        executor: execute.PluginExec | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_concurrent: int | None = None,
        memory: MemoryGate | None = None,
        observer: Callable[[str, str, float], None] | None = None,
    ) -> None:
        """`observer`: told (plugin, command, seconds) after every plugin execution; `memory`:
        delegates admitted by memory (the daemon's)."""
        self.path = tuple(path)
        self.cache = cache.AttachmentCache(cache_dir)
        self._exec = executor or execute.SubprocessExec()
        self.invoker = invoke.Invoker(
            self._exec,
            timeout=timeout,
            max_concurrent=max_concurrent,
            memory=memory,
            observer=observer,
        )
        self._versions: dict[tuple[str, execute.FileStamp], tuple[str, ...]] = {}

    def find_plugin(self, plugin_type: str) -> Path:
        """The plugin `plugin_type` in this runtime's path, as its exec finds it (CNI-FIND)."""
        return self._exec.find_in_path(plugin_type, self.path)

    def _call(self, command: str, rt: RuntimeConf | None = None) -> invoke.Invocation:
        if rt is None:
            return invoke.Invocation(command=command, path=self.path)
        return invoke.Invocation(
            command=command,
            container_id=rt.container_id,
            netns=rt.netns,
            ifname=rt.ifname,
            args=rt.args,
            path=self.path,
        )

    # -- versions ---------------------------------------------------------------------------

    async def plugin_versions(self, plugin_type: str) -> tuple[str, ...]:
        """The versions a plugin supports, asked once per executable file (CNI-VERSION)."""
        path = self.find_plugin(plugin_type)
        memo = (str(path), self._exec.file_stamp(path))
        if memo not in self._versions:
            self._versions[memo] = await self.invoker.version_info(
                plugin_type, path, self._call(spec.VERSION)
            )
        return self._versions[memo]

    async def validate_network_list(self, network: conf.NetworkConfigList) -> None:
        """Every plugin of the list supports the list's version, else code 1 naming it."""
        for plugin in network.plugins:
            await self._check_supports(network, plugin)

    async def _check_supports(
        self, network: conf.NetworkConfigList, plugin: conf.NetworkConfig
    ) -> None:
        supported = await self.plugin_versions(plugin.type)
        if network.cni_version not in supported:
            raise errors.IncompatibleVersionError(
                f"plugin {plugin.type} does not support config version {network.cni_version} "
                f"of network {network.name!r}",
                f"it supports {', '.join(supported) or 'nothing'}",
            )

    async def _run(
        self,
        network: conf.NetworkConfigList,
        plugin: conf.NetworkConfig,
        config: dict[str, Any],
        call: invoke.Invocation,
        gate: Awaitable[object] | None = None,
    ) -> result.Result | None:
        path = self.find_plugin(plugin.type)
        try:
            if call.command == spec.ADD:
                return await self.invoker.exec_with_result(
                    plugin.type, path, config, call, gate=gate
                )
            await self.invoker.exec_without_result(plugin.type, path, config, call)
            return None
        except errors.PluginError as exc:
            if exc.code == errors.IncompatibleVersionError.code:
                # Only now is the plugin's VERSION worth asking: to say what it does support.
                await self._check_supports(network, plugin)
            raise

    # -- ADD / CHECK / DEL ------------------------------------------------------------------------

    async def add_network_list(
        self,
        network: conf.NetworkConfigList,
        rt: RuntimeConf,
        *,
        record_intent: bool = True,
        gate: Awaitable[object] | None = None,
    ) -> result.Result:
        """ADD every plugin in order, chaining `prevResult`; the result is in the list's version.

        The record is written before the first plugin runs, so an ADD interrupted at any point
        can be deleted again. On a failure the chain stops (CNI spec); the caller decides to
        roll back with `del_network_list`, which then finds the record. `record_intent=False`:
        the caller keeps its own durable record of the attachment (the orchestrator's pod
        record), so the one before the plugins run would only repeat it; the result is cached.
        `gate`: the caller's record is still being written; the first plugin starts meanwhile
        but reads its config only once `gate` completes (`execute.PluginExec`).
        """
        key = _key(network, rt)
        record = cache.CachedAttachment(
            key=key,
            netns=rt.netns,
            config=network.raw,
            cni_args=rt.args,
            capability_args=dict(rt.capability_args),
            result=None,
        )
        if record_intent:
            self.cache.save(record)
        prev: result.Result | None = None
        call = self._call(spec.ADD, rt)
        for plugin in network.plugins:
            config = build_plugin_config(
                network, plugin, prev_result=prev, capability_args=rt.capability_args
            )
            prev = await self._run(network, plugin, config, call, gate)
            gate = None
        if prev is None:
            raise errors.InvalidNetworkConfigError(f"network {network.name!r} has no plugins")
        self.cache.save(record._replace(result=prev.to_raw()))
        return prev

    def cached_result(
        self, network: conf.NetworkConfigList, rt: RuntimeConf
    ) -> result.Result | None:
        """The result the ADD of this attachment returned, in the list's version, if recorded."""
        record = self.cache.load(_key(network, rt))
        if record is None or record.result is None:
            return None
        from netattach.cni import result_convert  # only with a recorded result

        parsed = result.parse_result(record.result, default_version=network.cni_version)
        return result_convert.convert(parsed, network.cni_version)

    async def check_network_list(self, network: conf.NetworkConfigList, rt: RuntimeConf) -> None:
        """CHECK every plugin in order with the cached result as `prevResult` (CNI-CHECK)."""
        if not version.at_least(network.cni_version, "0.4.0"):
            raise errors.IncompatibleVersionError(
                f"network {network.name!r} has config version {network.cni_version}, "
                "which does not support CHECK (0.4.0 or later does)"
            )
        if network.disable_check:
            return
        cached = self.cached_result(network, rt)
        if cached is None:
            raise errors.UnknownContainerError(
                f"no cached result for network {network.name!r}, container {rt.container_id}, "
                f"ifname {rt.ifname}"
            )
        call = self._call(spec.CHECK, rt)
        for plugin in network.plugins:
            config = build_plugin_config(
                network, plugin, prev_result=cached, capability_args=rt.capability_args
            )
            await self._run(network, plugin, config, call)

    async def del_network_list(
        self, network: conf.NetworkConfigList, rt: RuntimeConf, *, keep_going: bool = False
    ) -> None:
        """DEL every plugin in reverse order, then forget the record.

        From 0.4.0 on the cached result goes along as `prevResult`. A record that cannot be read
        does not stop the DEL: plugins must free what they hold without it (CNI spec), and a
        leaked IP is worse than a DEL without `prevResult`. When a plugin fails, the chain stops
        (CNI spec) and the record stays, so the runtime's retry runs the same DEL again.
        `keep_going` runs the remaining plugins anyway and then raises the last failure: a
        plugin that cannot DEL must not keep the others from freeing what they hold.
        """
        prev: result.Result | None = None
        if version.at_least(network.cni_version, "0.4.0"):
            try:
                prev = self.cached_result(network, rt)
            except errors.CNIError as exc:
                log.warning("%s; deleting network %r without prevResult", exc, network.name)
                prev = None
        call = self._call(spec.DEL, rt)
        missing: errors.CNIError | None = None
        failed: errors.CNIError | None = None
        for plugin in reversed(network.plugins):
            try:
                self.find_plugin(plugin.type)
            except errors.CNIError as exc:
                # A plugin removed since the ADD cannot free what it made, but the others can
                # still free theirs: go on, then fail so the record (and the retry) stay.
                missing = exc
                continue
            config = build_plugin_config(
                network, plugin, prev_result=prev, capability_args=rt.capability_args
            )
            try:
                await self._run(network, plugin, config, call)
            except errors.CNIError as exc:
                if not keep_going:
                    raise
                failed = exc
        failure = failed or missing
        if failure is not None:
            raise failure
        self.cache.delete(_key(network, rt))

    # -- STATUS / GC (CNI 1.1) -------------------------------------------------------------------

    async def get_status_network_list(self, network: conf.NetworkConfigList) -> None:
        """STATUS of every plugin; before 1.1.0 there is no STATUS and the network is ready."""
        if not version.at_least(network.cni_version, "1.1.0"):
            return
        call = self._call(spec.STATUS)
        for plugin in network.plugins:
            await self._run(network, plugin, build_plugin_config(network, plugin), call)

    async def gc_network_list(
        self, network: conf.NetworkConfigList, valid: Iterable[GCAttachment]
    ) -> None:
        """Delete this network's recorded attachments that are not in `valid`, then (1.1+) run
        each plugin's GC with `cni.dev/valid-attachments`. Every failure is reported; none stops
        the rest of the sweep."""
        if network.disable_gc:
            return
        keep = {(a.container_id, a.ifname) for a in valid}
        failures: list[errors.CNIError] = []
        for entry in list(self.cache.entries()):
            if isinstance(entry, cache.CorruptRecordError):
                continue  # not attributable to a network; the orchestrator's sweep reports it
            if entry.key.network_name != network.name:
                continue
            if (entry.key.container_id, entry.key.ifname) in keep:
                continue
            try:
                recorded = self._recorded_network(entry, network)
                assert recorded is not None  # falls back to `network`
                await self.del_network_list(recorded, _rt_of(entry))
            except errors.CNIError as exc:
                failures.append(exc)
        if version.at_least(network.cni_version, "1.1.0"):
            valid_raw = [{"containerID": c, "ifname": i} for c, i in sorted(keep)]
            call = self._call(spec.GC)
            for plugin in network.plugins:
                config = build_plugin_config(network, plugin)
                config[spec.VALID_ATTACHMENTS_KEY] = valid_raw
                try:
                    await self._run(network, plugin, config, call)
                except errors.CNIError as exc:
                    failures.append(exc)
        if failures:
            raise _combined(f"GC of network {network.name!r}", failures)

    async def del_container(self, container_id: str, *, ifname: str | None = None) -> int:
        """DEL every recorded attachment of a container (of its `ifname` only, when given), from
        the records alone; the number of attachments found.

        For when the caller's own bookkeeping is lost (a corrupt pod record): each attachment's
        record holds the config and arguments its ADD used. Every failure is reported; none
        stops the others.
        """
        failures: list[errors.CNIError] = []
        found = 0
        for entry in list(self.cache.entries()):
            if isinstance(entry, cache.CorruptRecordError):
                continue
            if entry.key.container_id != container_id:
                continue
            if ifname is not None and entry.key.ifname != ifname:
                continue
            network = self._recorded_network(entry, None)
            if network is None:
                continue
            found += 1
            try:
                await self.del_network_list(network, _rt_of(entry))
            except errors.CNIError as exc:
                failures.append(exc)
        if failures:
            raise _combined(f"DEL of container {container_id}", failures)
        return found

    @staticmethod
    def _recorded_network(
        entry: cache.CachedAttachment, current: conf.NetworkConfigList | None
    ) -> conf.NetworkConfigList | None:
        """The config the ADD used, so the DEL frees exactly what was made; else the current."""
        try:
            return conf.parse_any(entry.config, source=f"record {entry.key.filename()}")
        except errors.CNIError:
            return current


def _rt_of(entry: cache.CachedAttachment) -> RuntimeConf:
    return RuntimeConf(
        container_id=entry.key.container_id,
        ifname=entry.key.ifname,
        netns=entry.netns if entry.netns and os.path.exists(entry.netns) else "",
        args=entry.cni_args,
        capability_args=entry.capability_args,
    )


def _combined(what: str, failures: Sequence[errors.CNIError]) -> errors.CNIError:
    last = failures[-1]
    if len(failures) == 1:
        return last
    summary = "; ".join(str(f) for f in failures)
    return errors.PluginError(last.code, f"{what}: {len(failures)} failures", summary)
