"""The CNI environment: required variables per command, container IDs, ifnames and CNI_ARGS."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cni import env, errors, spec

pytestmark = pytest.mark.req("CNI-ENV")

FULL: dict[str, str] = {
    "CNI_CONTAINERID": "ctr1",
    "CNI_NETNS": "/run/netns/ns1",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/opt/cni/bin:/usr/libexec/cni",
}


def environ(command: str, **overrides: str | None) -> dict[str, str]:
    """A complete environment for `command`; an override of None removes the variable."""
    result = {"CNI_COMMAND": command, **FULL}
    for name, value in overrides.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def only(command: str, **variables: str) -> dict[str, str]:
    return {"CNI_COMMAND": command, **variables}


def invalid_environment(environ: dict[str, str]) -> errors.InvalidEnvironmentError:
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.parse_environment(environ)
    assert info.value.code == 4
    return info.value


# --- required variables per command ------------------------------------------------------------


def test_add_with_every_variable_is_parsed() -> None:
    got = env.parse_environment(environ("ADD", CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAME=p"))
    assert got == env.Environment(
        command="ADD",
        container_id="ctr1",
        netns="/run/netns/ns1",
        ifname="eth0",
        args=(("IgnoreUnknown", "1"), ("K8S_POD_NAME", "p")),
        path=("/opt/cni/bin", "/usr/libexec/cni"),
    )


@pytest.mark.parametrize("variable", ["CNI_NETNS", "CNI_ARGS", "CNI_PATH"])
def test_a_nul_in_any_variable_is_refused_naming_it_and_quoting_the_value(variable: str) -> None:
    # Only the daemon's socket can carry one: no plugin could be started with it.
    failure = invalid_environment(environ("ADD", **{variable: "K=a\0b"}))
    assert failure.msg == f"invalid {variable} 'K=a\\x00b'"


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
@pytest.mark.parametrize("variable", ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"])
def test_add_and_check_name_a_missing_variable(command: str, variable: str) -> None:
    err = invalid_environment(environ(command, **{variable: None}))
    assert err.msg == f"{variable} is not set for {command}"


@pytest.mark.parametrize("command", ["ADD", "CHECK", "DEL"])
def test_an_empty_variable_counts_as_missing(command: str) -> None:
    err = invalid_environment(environ(command, CNI_IFNAME=""))
    assert err.msg == f"CNI_IFNAME is not set for {command}"


def test_several_missing_variables_are_all_named() -> None:
    err = invalid_environment(only("ADD", CNI_IFNAME="eth0"))
    assert err.msg == "CNI_CONTAINERID, CNI_NETNS, CNI_PATH are not set for ADD"


def test_del_needs_no_netns() -> None:
    got = env.parse_environment(environ("DEL", CNI_NETNS=None))
    assert (got.command, got.container_id, got.netns, got.ifname) == ("DEL", "ctr1", "", "eth0")


@pytest.mark.parametrize("variable", ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"])
def test_del_names_a_missing_variable(variable: str) -> None:
    err = invalid_environment(environ("DEL", **{variable: None}))
    assert err.msg == f"{variable} is not set for DEL"


def test_version_needs_nothing_else() -> None:
    assert env.parse_environment({"CNI_COMMAND": "VERSION"}) == env.Environment(command="VERSION")


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_gc_and_status_need_only_path(command: str) -> None:
    got = env.parse_environment(only(command, CNI_PATH="/opt/cni/bin"))
    assert got == env.Environment(command=command, path=("/opt/cni/bin",))


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_gc_and_status_name_a_missing_path(command: str) -> None:
    err = invalid_environment(only(command))
    assert err.msg == f"CNI_PATH is not set for {command}"


def test_path_drops_empty_entries() -> None:
    got = env.parse_environment(only("GC", CNI_PATH=":/a::/b:"))
    assert got.path == ("/a", "/b")


def test_missing_command_is_named() -> None:
    err = invalid_environment(dict(FULL))
    assert err.msg == "CNI_COMMAND is not set"


@pytest.mark.parametrize("command", ["add", "FOO", "ADD ", "version"])
def test_invalid_command_is_quoted(command: str) -> None:
    err = invalid_environment(environ(command))
    assert err.msg == f"invalid CNI_COMMAND {command!r}"


def test_commands_cover_the_spec() -> None:
    assert frozenset({"ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS"}) == spec.COMMANDS


# --- container IDs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "container_id",
    ["a", "7", "Z9", "abc_1.2-3", "0" * 64, "a..b", "a--", "k8s_POD.default_uid-1"],
)
def test_valid_container_ids_are_accepted(container_id: str) -> None:
    assert env.check_container_id(container_id) == container_id
    assert env.parse_environment(environ("ADD", CNI_CONTAINERID=container_id)).container_id == (
        container_id
    )


@pytest.mark.parametrize(
    "container_id",
    ["-abc", "_abc", ".abc", "a/b", "a b", "a:b", "a;b", "é1", "1é", "abc\n", "a\0b", "../x"],
)
def test_invalid_container_ids_are_refused_and_quoted(container_id: str) -> None:
    err = invalid_environment(environ("ADD", CNI_CONTAINERID=container_id))
    assert err.msg == f"invalid CNI_CONTAINERID {container_id!r}"
    assert "starts with a letter or digit" in err.details


def test_empty_container_id_is_refused_when_checked_directly() -> None:
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.check_container_id("")
    assert info.value.msg == "invalid CNI_CONTAINERID ''"


def test_container_id_check_names_its_source() -> None:
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.check_container_id("-x", source="K8S_POD_INFRA_CONTAINER_ID")
    assert info.value.msg == "invalid K8S_POD_INFRA_CONTAINER_ID '-x'"


def test_container_id_is_checked_for_del_too() -> None:
    err = invalid_environment(environ("DEL", CNI_CONTAINERID="a/b"))
    assert err.msg == "invalid CNI_CONTAINERID 'a/b'"


# --- interface names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ifname",
    ["eth0", "a", "x" * 15, "net-1", "a.b", "...", "é" * 7 + "a", "veth_1@"],
    ids=["eth0", "one", "15-bytes", "dash", "dot-inside", "three-dots", "15-bytes-utf8", "at"],
)
def test_valid_ifnames_are_accepted(ifname: str) -> None:
    assert env.interface_name_problem(ifname) is None
    assert env.check_ifname(ifname) == ifname
    assert env.parse_environment(environ("ADD", CNI_IFNAME=ifname)).ifname == ifname


@pytest.mark.parametrize(
    ("ifname", "problem"),
    [
        ("x" * 16, "at most 15 bytes"),
        ("x" * 40, "at most 15 bytes"),
        ("é" * 8, "at most 15 bytes"),  # 8 characters, 16 bytes
        ("x" * 14 + "é", "at most 15 bytes"),  # 15 characters, 16 bytes
        ("€" * 5 + "x", "at most 15 bytes"),  # 6 characters, 16 bytes
        (".", "must not be '.' or '..'"),
        ("..", "must not be '.' or '..'"),
        ("a/b", "must not contain '/'"),
        ("a:b", "must not contain ':'"),
        ("a b", "must not contain ' '"),
        ("a\tb", "must not contain '\\t'"),
        ("eth0\n", "must not contain '\\n'"),
        ("a\u00a0b", "must not contain '\\xa0'"),
        ("a\0b", "must not contain '\\x00'"),
    ],
    ids=[
        "16-ascii",
        "40-ascii",
        "8-two-byte-chars",
        "14-ascii-plus-two-byte",
        "three-byte-chars",
        "dot",
        "dotdot",
        "slash",
        "colon",
        "space",
        "tab",
        "newline",
        "nbsp",
        "nul",
    ],
)
def test_invalid_ifnames_are_refused_and_quoted(ifname: str, problem: str) -> None:
    assert problem in (env.interface_name_problem(ifname) or "")
    err = invalid_environment(environ("ADD", CNI_IFNAME=ifname))
    assert err.msg == f"invalid CNI_IFNAME {ifname!r}"
    assert problem in err.details


def test_empty_ifname_is_refused_when_checked_directly() -> None:
    assert env.interface_name_problem("") == "an interface name must not be empty"
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.check_ifname("", source="interface")
    assert info.value.msg == "invalid interface ''"


def test_ifname_problem_lists_each_bad_character_once() -> None:
    assert env.interface_name_problem("a b/c d") == "an interface name must not contain ' /'"


# --- CNI_ARGS ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("", ()),
        ("K=V", (("K", "V"),)),
        ("K=V;K2=V2", (("K", "V"), ("K2", "V2"))),
        (";;K=V;;K2=V2;", (("K", "V"), ("K2", "V2"))),
        ("K=a=b=c", (("K", "a=b=c"),)),
        ("K=", (("K", ""),)),
        ("K=1;K=2", (("K", "1"), ("K", "2"))),
    ],
)
def test_parse_cni_args(text: str, pairs: tuple[tuple[str, str], ...]) -> None:
    assert env.parse_cni_args(text) == pairs


@pytest.mark.parametrize(("text", "piece"), [("K=V;oops", "oops"), ("=V", "=V"), ("bare", "bare")])
def test_a_piece_without_key_and_equals_is_refused_and_quoted(text: str, piece: str) -> None:
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.parse_cni_args(text)
    assert info.value.code == 4
    assert info.value.msg == f"invalid CNI_ARGS {text!r}"
    assert info.value.details == f"{piece!r} is not KEY=VALUE"


def test_invalid_cni_args_fail_parse_environment() -> None:
    err = invalid_environment(environ("ADD", CNI_ARGS="K8S_POD_NAME"))
    assert err.msg == "invalid CNI_ARGS 'K8S_POD_NAME'"


_keys = st.text(min_size=1).filter(lambda s: ";" not in s and "=" not in s)
_values = st.text().filter(lambda s: ";" not in s)


@settings(database=None, max_examples=200)
@given(pairs=st.lists(st.tuples(_keys, _values), max_size=8))
def test_format_cni_args_round_trips(pairs: list[tuple[str, str]]) -> None:
    text = env.format_cni_args(pairs)
    assert env.parse_cni_args(text) == tuple(pairs)


def test_format_cni_args_layout() -> None:
    assert env.format_cni_args([("A", "1"), ("B", "x=y")]) == "A=1;B=x=y"
    assert env.format_cni_args([]) == ""


def test_load_args_refuses_unknown_keys_and_names_them() -> None:
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.load_args([("K8S_POD_NAME", "p"), ("Zed", "1"), ("Alpha", "2")], ["K8S_POD_NAME"])
    assert info.value.code == 4
    assert info.value.msg == "invalid CNI_ARGS: unknown key(s) 'Alpha', 'Zed'"
    assert "IgnoreUnknown" in info.value.details


@pytest.mark.parametrize("flag", ["1", "true", "TRUE", "True", "tRuE"])
def test_load_args_drops_unknown_keys_when_ignore_unknown(flag: str) -> None:
    got = env.load_args(
        [("IgnoreUnknown", flag), ("K8S_POD_NAME", "p"), ("Other", "x")], ["K8S_POD_NAME"]
    )
    assert got == {"K8S_POD_NAME": "p"}


@pytest.mark.parametrize("flag", ["0", "false", "no", "yes", ""])
def test_load_args_still_refuses_when_ignore_unknown_is_not_true(flag: str) -> None:
    with pytest.raises(errors.InvalidEnvironmentError) as info:
        env.load_args([("IgnoreUnknown", flag), ("Other", "x")], ["K8S_POD_NAME"])
    assert info.value.msg == "invalid CNI_ARGS: unknown key(s) 'Other'"


def test_load_args_removes_ignore_unknown_itself() -> None:
    assert env.load_args([("IgnoreUnknown", "false"), ("A", "1")], ["A"]) == {"A": "1"}
    assert env.load_args([("IgnoreUnknown", "1")], ["A", "IgnoreUnknown"]) == {}


def test_load_args_keeps_known_keys_only_as_given() -> None:
    assert env.load_args([("A", "1"), ("B", "x=y")], ["A", "B", "C"]) == {"A": "1", "B": "x=y"}
    assert env.load_args([], ["A"]) == {}


def test_kubernetes_pod_identity_is_read_from_cni_args() -> None:
    keys = ["K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_INFRA_CONTAINER_ID", "K8S_POD_UID"]
    pairs = env.parse_cni_args(
        "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u"
    )
    assert env.load_args(pairs, keys) == {
        "K8S_POD_NAMESPACE": "ns",
        "K8S_POD_NAME": "p",
        "K8S_POD_INFRA_CONTAINER_ID": "abc",
        "K8S_POD_UID": "u",
    }
