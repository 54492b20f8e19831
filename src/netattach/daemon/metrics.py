"""Prometheus metrics and the health endpoints, on one small TCP listener.

/metrics   requests by command and result code, latency histograms, delegate executions
           running and queued, cache sync state, policy applies
/healthz   200 while the event loop answers
/readyz    200 once the default network is ready (standard §6.1), else 503
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

import prometheus_client

log = logging.getLogger("netattach.metrics")

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)
REQUESTS = prometheus_client.Counter(
    "netattach_cni_requests",
    "CNI calls answered, by command and CNI result code",
    ["command", "code"],
    registry=REGISTRY,
)
LATENCY = prometheus_client.Histogram(
    "netattach_cni_request_seconds",
    "Time to answer a CNI call, by command",
    ["command"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
DELEGATE_SECONDS = prometheus_client.Histogram(
    "netattach_delegate_seconds",
    "Time a delegate plugin process ran, by plugin type and command",
    ["plugin", "command"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
DELEGATES_RUNNING = prometheus_client.Gauge(
    "netattach_delegates_running", "Delegate plugin processes running now", registry=REGISTRY
)
DELEGATES_QUEUED = prometheus_client.Gauge(
    "netattach_delegates_queued",
    "Delegate executions waiting for a slot (maxConcurrentDelegates)",
    registry=REGISTRY,
)
DELEGATES_WAITING_MEMORY = prometheus_client.Gauge(
    "netattach_delegates_waiting_memory",
    "Delegate executions waiting for memory: the cgroup's limit cannot hold them yet",
    registry=REGISTRY,
)
DELEGATE_MEMORY_ADMITTED = prometheus_client.Gauge(
    "netattach_delegate_memory_admitted_bytes",
    "Memory the running delegates are expected to hold (each program's highest seen)",
    registry=REGISTRY,
)
WATCH_EVENTS = prometheus_client.Counter(
    "netattach_watch_events",
    "Watch events received from the API server, by kind (what the cluster sends this node)",
    ["kind"],
    registry=REGISTRY,
)
CACHE_SYNCED = prometheus_client.Gauge(
    "netattach_cache_synced", "1 once the cluster view has synced", registry=REGISTRY
)
READY = prometheus_client.Gauge(
    "netattach_ready", "1 once the default network is ready", registry=REGISTRY
)
POLICY_APPLIES = prometheus_client.Counter(
    "netattach_policy_applies",
    "Policy rulesets applied to pod namespaces, by result",
    ["result"],
    registry=REGISTRY,
)
POLICY_PASS_SECONDS = prometheus_client.Histogram(
    "netattach_policy_pass_seconds",
    "Time of one policy pass over the pods of this node (compile, render, apply changes)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)


class HealthServer:
    def __init__(self, *, ready: Callable[[], bool], before_scrape: Callable[[], None]) -> None:
        self.ready = ready
        self.before_scrape = before_scrape
        self._server: asyncio.base_events.Server | None = None

    async def start(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._server = await asyncio.start_server(self._serve, host.strip("[]"), int(port))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            target = parts[1] if len(parts) == 3 else ""
            if target == "/metrics":
                self.before_scrape()
                status, body = 200, prometheus_client.generate_latest(REGISTRY)
                kind = prometheus_client.CONTENT_TYPE_LATEST
            elif target == "/healthz":
                status, body, kind = 200, b"ok\n", "text/plain"
            elif target == "/readyz":
                ready = self.ready()
                status, body, kind = (
                    (200, b"ready\n", "text/plain")
                    if ready
                    else (503, b"not ready: waiting for the default network\n", "text/plain")
                )
            else:
                status, body, kind = 404, b"not found\n", "text/plain"
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        except Exception:  # a scrape must never hurt the daemon
            log.debug("health request failed", exc_info=True)
        finally:
            with contextlib.suppress(Exception):
                await writer.drain()
                writer.close()
                await writer.wait_closed()
