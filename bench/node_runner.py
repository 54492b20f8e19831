"""The benchmark's hands inside the node namespace: it runs and times every contender's process.

Started once per benchmark as `nsenter --net=<node> -- python -m bench.node_runner`, so every
program it starts is in the node's namespace without an `nsenter` of its own (as a kubelet's
runtime starts them), and every contender is timed by the same process the same way: from just
before the first process is spawned to just after the last one exits.

Requests and replies are one JSON object per line on stdin/stdout:

    {"op": "exec", "argv": [...], "env": {...}, "stdin": "..."}
        one program (the shim, netattach-thin, a peer meta-plugin): {"ms", "rc", "stdout",
        "stderr"}
    {"op": "exec_many", "calls": [exec, ...]}
        all at once: {"ms": wall time, "each": [{"ms", "rc", "stdout", "stderr"}, ...]}
    {"op": "floor", "command": "ADD"|"DEL", "pod": POD}
        the floor: the pod's delegates executed directly, one attachment after another, each
        config list as the CNI spec runs it (ADD in order with prevResult, DEL in reverse with
        the cached result); {"ms", "error"}
    {"op": "floor_many", "command": ..., "pods": [POD, ...], "limit": N}
        many pods at once, at most N delegate processes running (the daemon's
        maxConcurrentDelegates): {"ms": wall time, "errors": [error or null, per pod]}
    {"op": "http", "port": N, "path": "/metrics"}
        a GET on 127.0.0.1 of the node namespace (a daemon's metrics): {"status", "body"}, or
        {"status": 0, "body": why} when nothing answered
    {"op": "quit"}

POD is {"container_id", "netns", "args", "cni_path", "attachments": [{"ifname", "network"}]},
`network` a config list. Results of floor ADDs are kept in memory for the DELs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class Runner:
    def __init__(self) -> None:
        self.results: dict[tuple[str, str], dict[str, Any]] = {}
        self.slots: asyncio.Semaphore | None = None

    async def spawn(
        self, argv: list[str], env: dict[str, str], stdin: bytes
    ) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await proc.communicate(stdin)
        assert proc.returncode is not None
        return proc.returncode, out, err

    async def exec_one(self, call: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        rc, out, err = await self.spawn(
            list(call["argv"]), dict(call["env"]), str(call.get("stdin", "")).encode()
        )
        ms = (time.perf_counter() - t0) * 1e3
        return {
            "ms": ms,
            "rc": rc,
            "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace")[-2000:],
        }

    async def exec_many(self, calls: list[dict[str, Any]]) -> dict[str, Any]:
        t0 = time.perf_counter()
        each = await asyncio.gather(*(self.exec_one(call) for call in calls))
        return {"ms": (time.perf_counter() - t0) * 1e3, "each": each}

    # -- the floor ------------------------------------------------------------------------------

    async def plugin(
        self, pod: dict[str, Any], command: str, ifname: str, config: dict[str, Any]
    ) -> bytes:
        env = {
            "PATH": PATH,
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": pod["container_id"],
            "CNI_NETNS": pod["netns"],
            "CNI_IFNAME": ifname,
            "CNI_ARGS": pod["args"],
            "CNI_PATH": pod["cni_path"],
        }
        program = os.path.join(pod["cni_path"], config["type"])
        stdin = json.dumps(config).encode()
        if self.slots is None:
            rc, out, err = await self.spawn([program], env, stdin)
        else:
            async with self.slots:
                rc, out, err = await self.spawn([program], env, stdin)
        if rc != 0:
            raise RuntimeError(
                f"{config['type']} {command} {pod['container_id']}/{ifname}: exit {rc}: "
                f"{out.decode(errors='replace')} {err.decode(errors='replace')[-500:]}"
            )
        return out

    async def attachment(self, pod: dict[str, Any], command: str, att: dict[str, Any]) -> None:
        network, ifname = att["network"], att["ifname"]
        key = (pod["container_id"], ifname)
        head = {"name": network["name"], "cniVersion": network["cniVersion"]}
        if command == "ADD":
            prev: dict[str, Any] | None = None
            for plugin in network["plugins"]:
                config = {**plugin, **head}
                if prev is not None:
                    config["prevResult"] = prev
                prev = json.loads(await self.plugin(pod, command, ifname, config))
            assert prev is not None
            self.results[key] = prev
            return
        cached = self.results.pop(key, None)
        for plugin in reversed(network["plugins"]):
            config = {**plugin, **head}
            if cached is not None:
                config["prevResult"] = cached
            await self.plugin(pod, command, ifname, config)

    async def floor_pod(self, pod: dict[str, Any], command: str) -> str | None:
        """The pod's attachments, one after another (DEL in reverse, past failures)."""
        attachments = pod["attachments"]
        failures: list[str] = []
        for att in attachments if command == "ADD" else list(reversed(attachments)):
            try:
                await self.attachment(pod, command, att)
            except RuntimeError as exc:
                failures.append(str(exc))
                if command == "ADD":
                    break
        return "; ".join(failures) or None

    async def floor(self, request: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        error = await self.floor_pod(request["pod"], request["command"])
        return {"ms": (time.perf_counter() - t0) * 1e3, "error": error}

    async def floor_many(self, request: dict[str, Any]) -> dict[str, Any]:
        self.slots = asyncio.Semaphore(int(request["limit"]))
        try:
            t0 = time.perf_counter()
            found = await asyncio.gather(
                *(self.floor_pod(pod, request["command"]) for pod in request["pods"])
            )
            ms = (time.perf_counter() - t0) * 1e3
        finally:
            self.slots = None
        return {"ms": ms, "errors": found}

    async def http(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", int(request["port"])), 5
            )
        except (OSError, TimeoutError) as exc:
            return {"status": 0, "body": str(exc) or type(exc).__name__}
        try:
            writer.write(f"GET {request['path']} HTTP/1.0\r\nHost: bench\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), 10)
        except (OSError, TimeoutError) as exc:
            return {"status": 0, "body": str(exc) or type(exc).__name__}
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b"0"
        return {"status": int(status), "body": body.decode(errors="replace")}

    async def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "http":
            return await self.http(request)
        if op == "exec":
            return await self.exec_one(request)
        if op == "exec_many":
            return await self.exec_many(request["calls"])
        if op == "floor":
            return await self.floor(request)
        if op == "floor_many":
            return await self.floor_many(request)
        return {"error": f"unknown op {op!r}"}


async def serve() -> int:
    runner = Runner()
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return 0
        request = json.loads(line)
        if request.get("op") == "quit":
            return 0
        try:
            reply = await runner.answer(request)
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def main() -> int:
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve())
    return 130


if __name__ == "__main__":
    sys.exit(main())
