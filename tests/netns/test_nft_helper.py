"""The nft helper on real netns: what `nsenter ... nft` did, without two execs per write."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from netattach.cni import errors
from netattach.policy import apply

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
