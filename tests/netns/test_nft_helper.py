"""The nft helper on real netns: what `nsenter ... nft` did, without two execs per write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from netattach.cni import errors
from netattach.policy import apply, update

pytestmark = [pytest.mark.netns, pytest.mark.req("POL-UPDATE")]

TABLE = """add table inet netattach
delete table inet netattach
table inet netattach {
  set peers {
    type ipv4_addr
    elements = { 10.83.0.2 }
  }
}
"""


def test_each_request_runs_in_the_netns_it_names(make_pod: Callable[[], str]) -> None:
    first, second = make_pod(), make_pod()
    helper = apply.NftHelper()

    async def main() -> tuple[list[str], list[str], str | None, str | None]:
        await apply.apply_ruleset(first, TABLE, helper=helper)
        return (
            await apply.list_tables(first, helper=helper),
            await apply.list_tables(second, helper=helper),
            await apply.read_table(first, helper=helper),
            await apply.read_table(second, helper=helper),
        )

    try:
        in_first, in_second, text, none = asyncio.run(main())
    finally:
        helper.close()
    assert in_first == ["inet netattach"]
    assert in_second == []
    assert text is not None
    assert "10.83.0.2" in text
    assert none is None
    assert asyncio.run(apply.read_table(first)) == text  # nft as a program sees the same


def test_a_failing_script_quotes_nft_and_changes_nothing(make_pod: Callable[[], str]) -> None:
    pod = make_pod()
    helper = apply.NftHelper()

    async def main() -> str | None:
        await apply.apply_ruleset(pod, TABLE, helper=helper)
        with pytest.raises(errors.PolicyApplyError) as failed:
            await apply.apply_ruleset(
                pod,
                "add element inet netattach peers { 10.83.0.3 }\n"
                "add element inet netattach nope { 10.83.0.4 }\n",
                helper=helper,
            )
        assert "nope" in (failed.value.details or "")
        return await apply.read_table(pod, helper=helper)

    try:
        text = asyncio.run(main())
    finally:
        helper.close()
    assert text is not None
    assert "10.83.0.3" not in text


def test_a_missing_netns_is_an_apply_error_and_removal_is_idempotent(
    make_pod: Callable[[], str],
) -> None:
    pod = make_pod()
    helper = apply.NftHelper()

    async def main() -> tuple[bool, bool]:
        with pytest.raises(errors.PolicyApplyError, match="na-gone"):
            await apply.apply_ruleset("/run/netns/na-gone", TABLE, helper=helper)
        await apply.apply_ruleset(pod, TABLE, helper=helper)
        return (
            await apply.remove_table(pod, helper=helper),
            await apply.remove_table(pod, helper=helper),
        )

    try:
        assert asyncio.run(main()) == (True, False)
    finally:
        helper.close()


def test_no_socket_outlives_its_request_for_long(make_pod: Callable[[], str]) -> None:
    """Each request's netlink socket is closed by the helper's closer threads after the reply
    (a release waits for the kernel to free what a deletion left): none stays open, holding a
    pod's netns, once the writes are over."""
    pod = make_pod()
    helper = apply.NftHelper()

    async def main() -> int:
        await apply.apply_ruleset(pod, TABLE, helper=helper)
        for n in range(3, 23):
            await apply.apply_ruleset(
                pod,
                f"add element inet netattach peers {{ 10.83.0.{n} }}\n"
                f"delete element inet netattach peers {{ 10.83.0.{n - 1} }}\n",
                helper=helper,
            )
        assert helper.pid is not None
        return helper.pid

    try:
        pid = asyncio.run(main())
        deadline = time.monotonic() + 10
        while _sockets_of(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _sockets_of(pid) == 0
        text = asyncio.run(apply.read_table(pod, helper=helper))
    finally:
        helper.close()
    assert text is not None
    assert "10.83.0.22" in text
    assert "10.83.0.21" not in text


def _sockets_of(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd).startswith("socket:")
    return count


ADDRESS_SETS = """add table inet netattach
delete table inet netattach
table inet netattach {
  set s_a4 {
    type ipv4_addr
    elements = { 10.83.0.2, 10.83.0.3 }
  }
  set s_a6 {
    type ipv6_addr
    elements = { fd83::2 }
  }
}
"""


def _elements(pod: str, name: str) -> set[str]:
    out = subprocess.run(
        ["nsenter", f"--net={pod}", "--", "nft", "-j", "list", "set", "inet", "netattach", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (found,) = [i["set"] for i in json.loads(out)["nftables"] if "set" in i]
    return set(found.get("elem", []))


@pytest.mark.parametrize("through", ["helper", "nft"])
def test_element_changes_are_written_in_place_by_netlink_or_by_nft(
    make_pod: Callable[[], str], through: str
) -> None:
    """The helper writes hash-set element changes as nf_tables netlink messages; without it
    they are an nft script. The kernel ends up holding the same either way."""
    pod = make_pod()
    helper = apply.NftHelper() if through == "helper" else None
    many = [f"10.84.{i // 250}.{i % 250 + 1}" for i in range(3000)]  # more than one message

    async def main() -> None:
        await apply.apply_ruleset(pod, ADDRESS_SETS, helper=helper)
        await apply.update_elements(
            pod,
            [
                update.SetChange("s_a4", "ipv4_addr", ["10.83.0.2"], ["10.83.0.9", *many]),
                update.SetChange("s_a6", "ipv6_addr", ["fd83::2"], ["fd83::7", "fd83::8"]),
            ],
            helper=helper,
        )

    try:
        asyncio.run(main())
    finally:
        if helper is not None:
            helper.close()
    assert _elements(pod, "s_a4") == {"10.83.0.3", "10.83.0.9", *many}
    assert _elements(pod, "s_a6") == {"fd83::7", "fd83::8"}


def test_a_failing_element_change_names_its_set_and_changes_nothing(
    make_pod: Callable[[], str],
) -> None:
    pod = make_pod()
    helper = apply.NftHelper()

    async def main() -> list[str]:
        await apply.apply_ruleset(pod, ADDRESS_SETS, helper=helper)
        messages = []
        for changes in (
            # the second fails (no such element): the first is not made either
            [
                update.SetChange("s_a4", "ipv4_addr", [], ["10.83.0.50"]),
                update.SetChange("s_a6", "ipv6_addr", ["fd83::99"], []),
            ],
            [update.SetChange("nope", "ipv4_addr", [], ["10.83.0.51"])],
            [update.SetChange("s_a4", "ipv4_addr", [], ["10.83.0.300"])],
            [update.SetChange("s_a4", "inet_service", [], ["80"])],
        ):
            with pytest.raises(errors.PolicyApplyError) as failed:
                await apply.update_elements(pod, changes, helper=helper)
            assert pod in str(failed.value)
            messages.append(failed.value.details or "")
        return messages

    try:
        messages = asyncio.run(main())
    finally:
        helper.close()
    assert messages == [
        "delete element in set s_a6: No such file or directory",
        "add element in set nope: No such file or directory",
        "set s_a4: not a ipv4_addr in ['10.83.0.300']",
        "set s_a4: elements of type 'inet_service' are not written here",
    ]
    assert _elements(pod, "s_a4") == {"10.83.0.2", "10.83.0.3"}
    assert _elements(pod, "s_a6") == {"fd83::2"}
