"""What the node shows at ADD, as the guard's node rules read it (SEC-NODE, SEC-VALUES).

Values only: `pods/node_guard.py` reads them (netlink, sysctls, the pod records) and hands
them to `effects` and its own claim checks, and `netattach validate --node` to the same judge.
"""

from __future__ import annotations

from collections.abc import Mapping

from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from netattach.guard.node_rules import Address
    from netattach.netns.host import Link


class NodeFacts(NamedTuple):
    """The node's addresses, each with the interface it is on, its default gateways, its links,
    whether it forwards each IP family (4, 6: None when the switch is not there), and the
    accept_ra of each bridge."""

    addresses: tuple[tuple[str, Address], ...] = ()
    gateways: tuple[Address, ...] = ()
    links: tuple[Link, ...] = ()
    forwarding: tuple[tuple[int, bool | None], ...] = ()
    accept_ra: tuple[tuple[str, str], ...] = ()


class LiveAttachments(NamedTuple):
    """What the node's other live attachments hold: their pods' addresses (by whom), the
    host-side interfaces (bridges, host veths) they use, and the bridges that attachments still
    being added name (their plugin may be making one: up, accept_ra and MTU are not settled)."""

    addresses: Mapping[Address, str] = {}
    host_interfaces: frozenset[str] = frozenset()
    building: frozenset[str] = frozenset()
