"""The embedded default feed: a directory of manifests in, a ClusterStore out; status files out."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import netattach
from netattach.cluster import documents, files, model, store
from netattach.cni import errors

DATA = Path(__file__).parent / "data" / "manifests"

NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: blue
  labels: {team: blue}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: blue
  uid: 3f1c9a52-0f0e-4c55-9d1d-7c2f0b6e8a01
  annotations:
    k8s.v1.cni.cncf.io/networks: macvlan-conf@net1, blue/bridge-conf
"""

NAD = """\
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan-conf
  namespace: blue
spec:
  config: '{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}'
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def feed_of(directory: Path) -> tuple[files.DirectoryFeed, store.ClusterStore]:
    cluster = store.ClusterStore()
    return files.DirectoryFeed(directory, cluster), cluster


def names(cluster: store.ClusterStore, kind: str) -> set[tuple[str, str]]:
    return {(model.namespace_of(obj), model.name_of(obj)) for obj in cluster.objects(kind)}


def doc(kind: str, name: str, namespace: str | None = None, **extra: object) -> str:
    """One YAML document as JSON (which is YAML), so a test can state a bad field exactly."""
    metadata: dict[str, object] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    raw: dict[str, object] = {
        "apiVersion": model.API_VERSIONS[kind],
        "kind": kind,
        "metadata": metadata,
    }
    raw.update(extra)
    return json.dumps(raw)


# --- loading -------------------------------------------------------------------------------------


def test_a_multi_document_file_loads_every_kind(tmp_path: Path) -> None:
    nad_without_spec = doc(model.NAD, "bridge-conf", "blue")
    nad_with_a_config_list = doc(
        model.NAD,
        "chained",
        "blue",
        spec={
            "config": json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "chained",
                    "plugins": [{"type": "bridge"}, {"type": "tuning"}],
                }
            )
        },
    )
    policy = """\
    apiVersion: k8s.cni.cncf.io/v1beta1
    kind: MultiNetworkPolicy
    metadata:
      name: deny-all
      namespace: blue
      annotations: {k8s.v1.cni.cncf.io/policy-for: macvlan-conf}
    spec:
      podSelector: {}
      policyTypes: [Ingress]
    """
    write(
        tmp_path,
        "blue.yaml",
        "---\n".join([NAMESPACE, POD, NAD, nad_without_spec + "\n", nad_with_a_config_list + "\n"])
        + "---\n"
        + textwrap.dedent(policy),
    )
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    assert cluster.synced
    namespace = cluster.lookup_namespace("blue")
    assert namespace is not None
    assert model.labels(namespace) == {"team": "blue"}
    pod = cluster.lookup_pod("blue", "web")
    assert pod is not None
    assert model.uid_of(pod) == "3f1c9a52-0f0e-4c55-9d1d-7c2f0b6e8a01"
    assert model.annotation(pod, model.NETWORKS_ANNOTATION) == "macvlan-conf@net1, blue/bridge-conf"
    macvlan = cluster.lookup_nad("blue", "macvlan-conf")
    assert macvlan is not None
    assert json.loads(macvlan["spec"]["config"])["type"] == "macvlan"
    bare = cluster.lookup_nad("blue", "bridge-conf")
    assert bare is not None
    assert "spec" not in bare
    chained = cluster.lookup_nad("blue", "chained")
    assert chained is not None
    assert [p["type"] for p in json.loads(chained["spec"]["config"])["plugins"]] == [
        "bridge",
        "tuning",
    ]
    assert names(cluster, model.POLICY) == {("blue", "deny-all")}


def test_a_namespaced_object_without_a_namespace_lands_in_default(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", doc(model.POD, "lonely"))
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    pod = cluster.lookup_pod("default", "lonely")
    assert pod is not None
    assert model.namespace_of(pod) == "default"


def test_a_namespace_on_a_namespace_object_is_ignored(tmp_path: Path) -> None:
    write(tmp_path, "ns.yaml", doc(model.NAMESPACE, "green", "kube-system"))
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    assert cluster.lookup_namespace("green") is not None


def test_kubectl_get_output_loads_as_a_list(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_bytes((DATA / "kubectl-get-list.yaml").read_bytes())
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    pod = cluster.lookup_pod("blue", "web-0")
    assert pod is not None
    assert model.uid_of(pod) == "0d0c9e3a-5d0e-4f5b-9d49-1d2b8f1c2a10"
    nad = cluster.lookup_nad("blue", "macvlan-conf")
    assert nad is not None
    assert json.loads(nad["spec"]["config"])["ipam"]["subnet"] == "192.168.1.0/24"
    # An unquoted timestamp stays the string it reads as, as it does when kubectl converts YAML.
    assert nad["metadata"]["creationTimestamp"] == "2024-05-02T10:00:00Z"  # type: ignore[typeddict-item]


def test_an_api_list_gives_its_kind_to_items_that_carry_none(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pods.json",
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PodList",
                "items": [
                    {"metadata": {"name": "a", "namespace": "blue"}},
                    {"metadata": {"name": "b", "namespace": "blue"}},
                ],
            }
        ),
    )
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    assert names(cluster, model.POD) == {("blue", "a"), ("blue", "b")}


def test_a_bad_list_item_is_reported_and_the_other_items_load(tmp_path: Path) -> None:
    write(
        tmp_path,
        "list.yaml",
        """\
        apiVersion: v1
        kind: List
        items:
        - {apiVersion: v1, kind: Pod, metadata: {name: good}}
        - {apiVersion: v1, kind: Pod, metadata: {name: Bad}}
        - 42
        """,
    )
    feed, cluster = feed_of(tmp_path)

    problems = feed.load()

    assert [(p.document, p.message.split(":")[0]) for p in problems] == [
        (1, "items[1]"),
        (1, "items[2]"),
    ]
    assert names(cluster, model.POD) == {("default", "good")}


def test_kinds_netattach_does_not_read_are_ignored_without_a_problem(tmp_path: Path) -> None:
    write(
        tmp_path,
        "mixed.yaml",
        """\
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: settings}
        data: {a: "1"}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: Not_Even_A_Valid_Name}
        """,
    )
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()
    assert cluster.synced


def test_only_manifest_files_directly_in_the_directory_are_read(tmp_path: Path) -> None:
    write(tmp_path, "a.yml", doc(model.POD, "from-yml"))
    write(tmp_path, "b.json", doc(model.POD, "from-json"))
    write(tmp_path, "c.yaml", doc(model.POD, "from-yaml"))
    write(tmp_path, ".hidden.yaml", doc(model.POD, "hidden"))
    write(tmp_path, "notes.txt", doc(model.POD, "text"))
    write(tmp_path, "c.yaml.bak", doc(model.POD, "backup"))
    (tmp_path / "status" / "blue").mkdir(parents=True)
    write(tmp_path / "status" / "blue", "web.json", "[]")
    write(tmp_path / "status", "stray.yaml", doc(model.POD, "in-status"))
    (tmp_path / "dir.yaml").mkdir()
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    assert names(cluster, model.POD) == {
        ("default", "from-yml"),
        ("default", "from-json"),
        ("default", "from-yaml"),
    }


def test_empty_documents_and_empty_files_are_nothing(tmp_path: Path) -> None:
    write(tmp_path, "empty.yaml", "")
    write(tmp_path, "comments.yaml", "# nothing here\n---\n---\n")
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()
    assert cluster.synced


# --- bad documents -------------------------------------------------------------------------------

BAD_DOCUMENTS = {
    "a list": "[1, 2]",
    "a scalar": "just text",
    "no kind": '{"apiVersion": "v1", "metadata": {"name": "x"}}',
    "kind not a string": '{"apiVersion": "v1", "kind": 7, "metadata": {"name": "x"}}',
    "wrong apiVersion": '{"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "x"}}',
    "NAD with the policy group version": doc(model.NAD, "x").replace(
        model.API_VERSIONS[model.NAD], model.API_VERSIONS[model.POLICY]
    ),
    "no apiVersion": '{"kind": "Pod", "metadata": {"name": "x"}}',
    "no metadata": '{"apiVersion": "v1", "kind": "Pod"}',
    "metadata not an object": '{"apiVersion": "v1", "kind": "Pod", "metadata": "x"}',
    "no name": '{"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "blue"}}',
    "name not a string": '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 12}}',
    "name upper case": doc(model.POD, "Web"),
    "name with a dot": doc(model.NAD, "a.b"),
    "name with a slash": doc(model.POD, "../x"),
    "name empty": doc(model.POD, ""),
    "name too long": doc(model.NAD, "a" * 64),
    "pod name too long": doc(model.POD, "a" * 254),
    "namespace not a label": doc(model.POD, "x", "Blue_Team"),
    "namespace not a string": doc(model.POD, "x", None, metadata={"name": "x", "namespace": 1}),
    "uid not a string": doc(model.POD, "x", None, metadata={"name": "x", "uid": 5}),
    "label value a number": doc(model.POD, "x", None, metadata={"name": "x", "labels": {"v": 1}}),
    "annotations a list": doc(model.POD, "x", None, metadata={"name": "x", "annotations": []}),
    "networks annotation an object": doc(
        model.POD,
        "x",
        None,
        metadata={"name": "x", "annotations": {model.NETWORKS_ANNOTATION: {"name": "a"}}},
    ),
    "spec a list": doc(model.POD, "x", spec=[]),
    "NAD config an object": doc(model.NAD, "x", spec={"config": {"type": "bridge"}}),
    "NAD config a list": doc(model.NAD, "x", spec={"config": [{"type": "bridge"}]}),
    "a date": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: !!timestamp 2024-01-01",
    "bytes": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {blob: !!binary aGk=}",
    "a set": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: !!set {a, b}",
    "a non-string key": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {1: one}",
    "not a number": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {n: .nan}",
    "a List of non-list items": "apiVersion: v1\nkind: List\nitems: {a: 1}",
    "a List inside a List": "apiVersion: v1\nkind: List\nitems: [{kind: List, items: []}]",
}


@pytest.mark.parametrize("bad", BAD_DOCUMENTS.values(), ids=BAD_DOCUMENTS.keys())
def test_a_bad_document_is_reported_and_skipped_while_the_rest_load(
    tmp_path: Path, bad: str
) -> None:
    path = write(
        tmp_path,
        "pods.yaml",
        "---\n".join([doc(model.POD, "before") + "\n", bad + "\n", doc(model.POD, "after") + "\n"]),
    )
    write(tmp_path, "other.yaml", NAD)
    feed, cluster = feed_of(tmp_path)

    problems = feed.load()

    assert len(problems) == 1, problems
    (problem,) = problems
    assert (problem.path, problem.document) == (str(path), 2)
    assert str(problem).startswith(f"{path} document 2: ")
    assert names(cluster, model.POD) == {("default", "before"), ("default", "after")}
    assert names(cluster, model.NAD) == {("blue", "macvlan-conf")}
    assert cluster.synced


def test_every_problem_of_a_document_is_named_at_once(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pod.yaml",
        doc(model.POD, "Web", "Blue", metadata={"name": "Web", "namespace": "Blue", "uid": 1}),
    )
    feed, _ = feed_of(tmp_path)

    (problem,) = feed.load()

    assert "metadata.name 'Web'" in problem.message
    assert "metadata.namespace 'Blue'" in problem.message
    assert "metadata.uid" in problem.message


def test_a_later_duplicate_wins_and_is_reported(tmp_path: Path) -> None:
    # Lexical order: "10-..." is read before "2-...".
    write(tmp_path, "10-first.yaml", doc(model.POD, "web", "blue", spec={"which": "first"}))
    second = write(
        tmp_path,
        "2-second.yaml",
        "---\n".join(
            [
                doc(model.NAD, "only", "blue") + "\n",
                doc(model.POD, "web", "blue", spec={"which": "second"}) + "\n",
            ]
        ),
    )
    feed, cluster = feed_of(tmp_path)

    problems = feed.load()

    assert [(p.path, p.document) for p in problems] == [(str(second), 2)]
    assert "duplicate Pod blue/web" in problems[0].message
    assert "10-first.yaml document 1" in problems[0].message
    pod = cluster.lookup_pod("blue", "web")
    assert pod is not None
    assert pod["spec"] == {"which": "second"}


def test_the_same_name_in_two_kinds_or_namespaces_is_no_duplicate(tmp_path: Path) -> None:
    write(
        tmp_path,
        "all.yaml",
        "---\n".join(
            doc(kind, "same", namespace) + "\n"
            for kind, namespace in [
                (model.POD, "blue"),
                (model.POD, "green"),
                (model.NAD, "blue"),
                (model.POLICY, "blue"),
                (model.NAMESPACE, None),
            ]
        ),
    )
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()
    assert names(cluster, model.POD) == {("blue", "same"), ("green", "same")}


# --- bad files -----------------------------------------------------------------------------------


def test_a_yaml_syntax_error_names_the_file_and_line_and_other_files_load(tmp_path: Path) -> None:
    broken = write(
        tmp_path,
        "a-broken.yaml",
        doc(model.POD, "before-the-error") + "\n---\napiVersion: v1\nkind: [Pod\nmetadata: {}\n",
    )
    write(tmp_path, "b-good.yaml", POD)
    feed, cluster = feed_of(tmp_path)

    problems = feed.load()

    assert len(problems) == 1
    (problem,) = problems
    assert problem.path == str(broken)
    assert problem.document == 2
    assert problem.message.startswith("not valid YAML at line 5 column 9: ")
    assert "(while parsing a flow sequence at line 4 column 7)" in problem.message
    # The file is read whole or not at all.
    assert names(cluster, model.POD) == {("blue", "web")}


def test_a_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    write(tmp_path, "pod.json", '{\n  "kind": "Pod",\n  "apiVersion": }\n')
    feed, _ = feed_of(tmp_path)

    (problem,) = feed.load()

    assert "not valid JSON at line 3" in problem.message


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff\xfe\xfa not text", id="not UTF-8"),
        pytest.param(b"a: !!python/object:os.system ls\n", id="unsafe tag"),
        pytest.param(b"a: *nowhere\n", id="undefined alias"),
        pytest.param(b"a: 2024-13-45\nb: !!timestamp 2024-13-45\n", id="impossible date"),
        pytest.param(b"a: " + b"1" * 5000 + b"\n", id="int past the digit limit"),
        pytest.param(b"\t- tab\n", id="tab indent"),
    ],
)
def test_unreadable_yaml_is_one_problem_never_an_exception(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "bad.yaml").write_bytes(data)
    write(tmp_path, "good.yaml", POD)
    feed, cluster = feed_of(tmp_path)

    problems = feed.load()

    assert [p.path for p in problems] == [str(tmp_path / "bad.yaml")]
    assert cluster.lookup_pod("blue", "web") is not None


def test_a_file_over_the_size_limit_is_refused_unparsed(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as out:
        out.write(doc(model.POD, "hidden-in-big").encode() + b"\n")
        out.write(b"#" * files.MAX_FILE_BYTES + b"\n")
    write(tmp_path, "small.yaml", POD)
    feed, cluster = feed_of(tmp_path)

    started = time.monotonic()
    problems = feed.load()

    assert time.monotonic() - started < 2
    assert [(p.path, p.document) for p in problems] == [(str(big), 0)]
    assert "larger than" in problems[0].message
    assert str(problems[0]) == f"{big}: {problems[0].message}"
    assert names(cluster, model.POD) == {("blue", "web")}


def billion_laughs(levels: int = 10) -> str:
    lines = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*lol{level - 1}"] * 10)
        lines.append(f"lol{level}: &lol{level} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda bomb: bomb, id="bare"),
        pytest.param(
            lambda bomb: (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n"
                + textwrap.indent(bomb, "  ")
            ),
            id="inside a pod",
        ),
        pytest.param(
            lambda bomb: "---\n".join(
                f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}}}\nspec:\n"
                + textwrap.indent(billion_laughs(5), "  ")
                for n in range(30)
            ),
            id="many small bombs in one file",
        ),
    ],
)
def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path: Path, wrap: Callable[[str], str]) -> None:
    bomb = write(tmp_path, "bomb.yaml", wrap(billion_laughs()))
    write(tmp_path, "good.yaml", POD)
    feed, cluster = feed_of(tmp_path)

    started = time.monotonic()
    problems = feed.load()

    assert time.monotonic() - started < 2
    assert [p.path for p in problems] == [str(bomb)]
    assert "expands to more than" in problems[0].message
    assert names(cluster, model.POD) == {("blue", "web")}


def test_an_alias_to_itself_is_refused(tmp_path: Path) -> None:
    write(
        tmp_path, "loop.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: &s {a: *s}\n"
    )
    feed, cluster = feed_of(tmp_path)

    (problem,) = feed.load()

    assert "refers to itself" in problem.message
    assert cluster.objects(model.POD) == []


def test_modest_aliases_load_and_are_not_shared(tmp_path: Path) -> None:
    write(
        tmp_path,
        "anchors.yaml",
        """\
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: Pod
          metadata: &meta {name: a, namespace: blue, labels: &labels {app: web}}
        - apiVersion: v1
          kind: Pod
          metadata: {name: b, namespace: blue, labels: *labels}
        """,
    )
    feed, cluster = feed_of(tmp_path)

    assert feed.load() == ()

    a, b = cluster.lookup_pod("blue", "a"), cluster.lookup_pod("blue", "b")
    assert a is not None
    assert b is not None
    assert model.labels(a) == model.labels(b) == {"app": "web"}
    assert a["metadata"]["labels"] is not b["metadata"]["labels"]


@pytest.mark.parametrize("depth", [documents.MAX_DEPTH + 1, 200_000])
def test_deep_nesting_is_refused_not_a_crash(tmp_path: Path, depth: int) -> None:
    # libyaml's C composer would overflow the C stack here (SIGSEGV) at the larger depth.
    write(tmp_path, "deep.yaml", "a: " + "[" * depth + "]" * depth + "\n")
    feed, _ = feed_of(tmp_path)

    (problem,) = feed.load()

    assert "nested" in problem.message


def test_a_fifo_named_like_a_manifest_does_not_hang_the_load(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    write(tmp_path, "good.yaml", POD)
    feed, cluster = feed_of(tmp_path)

    (problem,) = feed.load()

    assert problem.message == "not a regular file"
    assert cluster.lookup_pod("blue", "web") is not None


def test_a_dangling_symlink_is_reported(tmp_path: Path) -> None:
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    feed, _ = feed_of(tmp_path)

    (problem,) = feed.load()

    assert problem.path == str(tmp_path / "gone.yaml")
    assert "cannot open" in problem.message


def test_a_missing_directory_is_a_problem_and_an_empty_synced_store(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    feed, cluster = feed_of(missing)

    (problem,) = feed.load()

    assert problem.path == str(missing)
    assert cluster.synced
    assert cluster.objects(model.POD) == []


def test_a_directory_that_disappears_empties_the_store(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write(manifests, "pod.yaml", POD)
    feed, cluster = feed_of(manifests)
    assert feed.load() == ()

    (manifests / "pod.yaml").unlink()
    manifests.rmdir()

    assert len(feed.load()) == 1
    assert cluster.lookup_pod("blue", "web") is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.text(alphabet="abk:-[]{}&*!|>'\"#\n 0123456789.,?%@`", max_size=300).map(str.encode),
    ),
    suffix=st.sampled_from([".yaml", ".json"]),
)
def test_any_file_content_loads_without_raising(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / f"x{suffix}").write_bytes(data)
        feed, cluster = feed_of(Path(directory))

        problems = feed.load()

        assert cluster.synced
        assert all(isinstance(p, files.ManifestProblem) for p in problems)


# --- watching ------------------------------------------------------------------------------------

INTERVAL = 0.05


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(INTERVAL / 5)


def test_run_loads_at_once_and_follows_added_changed_and_deleted_files(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD)
    feed, cluster = feed_of(tmp_path)
    changes: list[int] = []

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=INTERVAL, on_change=lambda: changes.append(1)))
        try:
            await eventually(lambda: cluster.lookup_pod("blue", "web") is not None)
            assert cluster.synced

            write(tmp_path, "nad.yaml", NAD)  # added
            await eventually(lambda: cluster.lookup_nad("blue", "macvlan-conf") is not None)

            write(tmp_path, "pod.yaml", POD.replace("name: web", "name: web-2"))  # changed
            await eventually(lambda: names(cluster, model.POD) == {("blue", "web-2")})

            (tmp_path / "nad.yaml").unlink()  # deleted
            await eventually(lambda: cluster.lookup_nad("blue", "macvlan-conf") is None)
            assert names(cluster, model.POD) == {("blue", "web-2")}
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    assert len(changes) >= 4


def test_run_notices_a_same_size_file_renamed_over(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", doc(model.POD, "aaa"))
    feed, cluster = feed_of(tmp_path)
    assert feed.load() == ()

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=INTERVAL))
        try:
            await asyncio.sleep(INTERVAL)
            replacement = write(tmp_path, ".pod.yaml.tmp", doc(model.POD, "bbb"))
            replacement.replace(tmp_path / "pod.yaml")
            await eventually(lambda: names(cluster, model.POD) == {("default", "bbb")})
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_run_does_not_reload_an_unchanged_directory(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD)
    feed, _ = feed_of(tmp_path)
    changes: list[int] = []

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=INTERVAL, on_change=lambda: changes.append(1)))
        try:
            await eventually(lambda: len(changes) == 1)
            await asyncio.sleep(INTERVAL * 6)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    assert changes == [1]


def test_run_after_load_waits_for_a_change(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD)
    feed, cluster = feed_of(tmp_path)
    feed.load()
    changes: list[int] = []

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=INTERVAL, on_change=lambda: changes.append(1)))
        try:
            await asyncio.sleep(INTERVAL * 4)
            assert changes == []
            write(tmp_path, "nad.yaml", NAD)
            await eventually(lambda: changes == [1])
            assert cluster.lookup_nad("blue", "macvlan-conf") is not None
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_a_failing_on_change_does_not_stop_the_feed(tmp_path: Path) -> None:
    feed, cluster = feed_of(tmp_path)
    calls: list[int] = []

    def explode() -> None:
        calls.append(1)
        raise RuntimeError("subscriber bug")

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=INTERVAL, on_change=explode))
        try:
            await eventually(lambda: len(calls) == 1)
            write(tmp_path, "pod.yaml", POD)
            await eventually(lambda: cluster.lookup_pod("blue", "web") is not None)
            assert len(calls) == 2
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_run_reports_problems_of_a_reload(tmp_path: Path) -> None:
    feed, cluster = feed_of(tmp_path)

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=INTERVAL))
        try:
            await eventually(lambda: cluster.synced)
            assert feed.problems == ()
            write(tmp_path, "bad.yaml", doc(model.POD, "Bad"))
            await eventually(lambda: len(feed.problems) == 1)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


# --- the parse cache (the thin plugin's) ---------------------------------------------------------


def cached_feed(directory: Path, cache: Path) -> tuple[files.DirectoryFeed, store.ClusterStore]:
    cluster = store.ClusterStore()
    return files.DirectoryFeed(directory, cluster, parse_cache=cache), cluster


def loaded(directory: Path, cache: Path | None) -> tuple[list[object], list[str]]:
    """What a fresh feed loads: every object (sorted) and every problem, as text."""
    cluster = store.ClusterStore()
    problems = files.DirectoryFeed(directory, cluster, parse_cache=cache).load()
    objects = sorted(
        json.dumps(obj, sort_keys=True)
        for kind in model.API_VERSIONS
        for obj in cluster.objects(kind)
    )
    return list(objects), [str(p) for p in problems]


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    write(directory, "ns.yaml", NAMESPACE)
    write(directory, "pod.yaml", POD)
    write(directory, "nad.yaml", NAD)
    write(
        directory, "bad.yaml", "\n---\n".join([doc(model.POD, "fine"), doc(model.POD, "Bad_Name")])
    )
    write(directory, "broken.yaml", "key: [unclosed\n")
    return directory


def test_a_cached_load_is_the_same_load_without_parsing_again(
    manifests: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "state" / "manifest-cache.json"
    uncached = loaded(manifests, None)
    assert loaded(manifests, cache) == uncached  # the first load writes the cache
    assert cache.exists()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600

    def no_parsing(data: bytes, *, is_json: bool) -> list[object]:
        raise AssertionError("parsed an unchanged file")

    monkeypatch.setattr(documents, "parse_documents", no_parsing)
    assert loaded(manifests, cache) == uncached
    assert len(uncached[1]) == 2  # the bad document and the broken file, from the cache too


def test_a_changed_added_or_removed_file_is_seen_through_the_cache(
    manifests: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "manifest-cache.json"
    loaded(manifests, cache)
    write(manifests, "pod.yaml", POD.replace("name: web", "name: web-2"))
    write(manifests, "more.yaml", doc(model.POD, "extra", "blue"))
    (manifests / "nad.yaml").unlink()
    feed, cluster = cached_feed(manifests, cache)

    feed.load()

    assert names(cluster, model.POD) == {("blue", "web-2"), ("blue", "extra"), ("default", "fine")}
    assert names(cluster, model.NAD) == set()
    assert loaded(manifests, cache) == loaded(manifests, None)
    assert sorted(json.loads(cache.read_text())["files"]) == [
        "bad.yaml",
        "broken.yaml",
        "more.yaml",
        "ns.yaml",
        "pod.yaml",
    ]


CACHE_HEAD = b'{"kind": "netattachManifestCacheV1", "netattach": "VERSION", "directory": '


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{not json",
        b"[]",
        CACHE_HEAD + b'"/elsewhere", "files": {}}',
        CACHE_HEAD + b'"DIR", "files": {"pod.yaml": 1}}',
        CACHE_HEAD + b'"DIR", "files": {"pod.yaml": {"stamp": [1, 2], "found": []}}}',
        CACHE_HEAD + b'"DIR", "files": {"pod.yaml": {"stamp": [1, 2, 3, 4], "found": [[1, 7]]}}}',
    ],
)
def test_a_damaged_or_foreign_cache_is_ignored_and_rewritten(
    manifests: Path, tmp_path: Path, damage: bytes
) -> None:
    cache = tmp_path / "manifest-cache.json"
    damage = damage.replace(b"VERSION", netattach.__version__.encode())
    cache.write_bytes(damage.replace(b"DIR", str(manifests).encode()))

    assert loaded(manifests, cache) == loaded(manifests, None)
    assert json.loads(cache.read_text())["directory"] == str(manifests)


@pytest.mark.parametrize(("version", "seen"), [(None, "stale"), ("0.0.0", "web")])
def test_a_cache_is_trusted_only_from_this_version_of_netattach(
    manifests: Path, tmp_path: Path, version: str | None, seen: str
) -> None:
    cache = tmp_path / "manifest-cache.json"
    loaded(manifests, cache)
    raw = json.loads(cache.read_text())
    ((_, cached_pod),) = raw["files"]["pod.yaml"]["found"]
    cached_pod["metadata"]["name"] = "stale"  # what an older netattach might have made of it
    if version is not None:
        raw["netattach"] = version
    cache.write_text(json.dumps(raw))
    feed, cluster = cached_feed(manifests, cache)

    feed.load()

    assert ("blue", seen) in names(cluster, model.POD)


def test_a_cache_that_cannot_be_written_costs_only_the_parsing(
    manifests: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache's directory is a file: every write fails

    assert loaded(manifests, blocked / "manifest-cache.json") == loaded(manifests, None)


# --- status files --------------------------------------------------------------------------------

ENTRIES: list[dict[str, object]] = [
    {"name": "cbr0", "interface": "eth0", "ips": ["10.244.1.7"], "default": True},
    {"name": "blue/macvlan-conf", "interface": "net1", "ips": ["192.168.1.20"], "mac": "aa:bb"},
]


def test_status_round_trip(tmp_path: Path, umask_zero: None) -> None:
    feed, _ = feed_of(tmp_path)

    asyncio.run(feed.publish_status("blue", "web", ENTRIES))

    path = tmp_path / "status" / "blue" / "web.json"
    assert feed.status_path("blue", "web") == path
    assert json.loads(path.read_text()) == ENTRIES
    assert stat.S_IMODE(path.stat().st_mode) == files.STATUS_MODE
    assert feed.read_status("blue", "web") == ENTRIES
    assert feed.read_status("blue", "other") is None

    asyncio.run(feed.remove_status("blue", "web"))

    assert not path.exists()
    assert feed.read_status("blue", "web") is None
    asyncio.run(feed.remove_status("blue", "web"))  # idempotent
    asyncio.run(feed.remove_status("green", "never-there"))


def test_status_files_are_not_read_as_manifests(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD)
    feed, _ = feed_of(tmp_path)

    asyncio.run(feed.publish_status("blue", "web", ENTRIES))

    assert feed.load() == ()


@pytest.mark.parametrize("bad", ["../x", "..", ".", "", "a/b", "Web", "a" * 254, "x\n", "-a"])
def test_status_paths_refuse_names_that_are_not_dns_labels(tmp_path: Path, bad: str) -> None:
    feed, _ = feed_of(tmp_path)

    with pytest.raises(errors.InvalidEnvironmentError):
        feed.status_path(bad, "web")
    with pytest.raises(errors.InvalidEnvironmentError):
        feed.status_path("blue", bad)
    with pytest.raises(errors.InvalidEnvironmentError):
        asyncio.run(feed.publish_status("blue", bad, ENTRIES))
    with pytest.raises(errors.InvalidEnvironmentError):
        asyncio.run(feed.remove_status(bad, "web"))
    with pytest.raises(errors.InvalidEnvironmentError):
        feed.read_status(bad, "web")

    assert list(tmp_path.rglob("*")) == []


@pytest.mark.req("RT-ATOMIC")
def test_status_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feed, _ = feed_of(tmp_path)
    asyncio.run(feed.publish_status("blue", "web", ENTRIES))
    directory = tmp_path / "status" / "blue"
    assert [p.name for p in directory.iterdir()] == ["web.json"]  # no temp file left

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(errors.IOFailureError):
        asyncio.run(feed.publish_status("blue", "web", ENTRIES[:1]))

    # The reader still sees the whole old status, and the half-written new one is gone.
    assert feed.read_status("blue", "web") == ENTRIES
    assert [p.name for p in directory.iterdir()] == ["web.json"]


def test_a_corrupt_status_file_is_a_decoding_failure(tmp_path: Path) -> None:
    feed, _ = feed_of(tmp_path)
    path = feed.status_path("blue", "web")
    path.parent.mkdir(parents=True)

    path.write_text('[{"name": ')
    with pytest.raises(errors.DecodingFailureError):
        feed.read_status("blue", "web")

    path.write_text('{"name": "x"}')
    with pytest.raises(errors.DecodingFailureError):
        feed.read_status("blue", "web")


def test_status_entries_that_are_not_json_are_refused(tmp_path: Path) -> None:
    feed, _ = feed_of(tmp_path)

    with pytest.raises(errors.InternalError):
        asyncio.run(feed.publish_status("blue", "web", [{"ips": {1, 2}}]))
    with pytest.raises(errors.InternalError):
        asyncio.run(feed.publish_status("blue", "web", [{"x": float("nan")}]))

    assert not feed.status_path("blue", "web").exists()


def test_a_problem_reads_as_path_document_message() -> None:
    problem = files.ManifestProblem(path="/m/a.yaml", document=3, message="no kind")

    assert str(problem) == "/m/a.yaml document 3: no kind"


def test_pod_names_may_be_dns_subdomains(tmp_path: Path) -> None:
    feed, _ = feed_of(tmp_path)
    asyncio.run(feed.publish_status("blue", "web.v1", ENTRIES))
    assert feed.read_status("blue", "web.v1") == ENTRIES
    assert feed.status_path("blue", "web.v1") == tmp_path / "status" / "blue" / "web.v1.json"


# --- being woken, and reading only what changed ---------------------------------------------------

NEVER = 3600.0  # a poll interval no test waits for: only inotify can wake the feed in time


def test_run_is_woken_by_a_write_without_waiting_for_its_poll(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD)
    feed, cluster = feed_of(tmp_path)

    async def scenario() -> None:
        task = asyncio.create_task(feed.run(interval=NEVER))
        try:
            await eventually(lambda: cluster.lookup_pod("blue", "web") is not None)
            replacement = write(tmp_path, ".nad.yaml.tmp", NAD)
            replacement.replace(tmp_path / "nad.yaml")  # renamed in, as kubectl-like tools do
            await eventually(lambda: cluster.lookup_nad("blue", "macvlan-conf") is not None)
            write(tmp_path, "pod.yaml", POD.replace("name: web", "name: web-2"))  # rewritten
            await eventually(lambda: names(cluster, model.POD) == {("blue", "web-2")})
            (tmp_path / "nad.yaml").unlink()
            await eventually(lambda: cluster.lookup_nad("blue", "macvlan-conf") is None)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_a_reload_parses_only_changed_files_and_reports_only_changed_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "a.yaml", NAMESPACE + "---\n" + NAD)
    write(tmp_path, "pod.yaml", POD)
    feed, cluster = feed_of(tmp_path)
    assert feed.load() == ()
    parsed: list[str] = []
    real = files._load_file

    def counted(path: str) -> Iterator[tuple[int, model.KubeObject | str]]:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(files, "_load_file", counted)
    seen: list[tuple[str, str, str]] = []
    cluster.observers.append(lambda kind, ns, name: seen.append((kind, ns, name)))

    write(tmp_path, "pod.yaml", POD.replace("blue/bridge-conf", "blue/other-conf"))
    assert feed.load() == ()
    assert parsed == [str(tmp_path / "pod.yaml")]
    assert seen == [(model.POD, "blue", "web")]

    parsed.clear()
    seen.clear()
    (tmp_path / "pod.yaml").unlink()
    assert feed.load() == ()
    assert parsed == []
    assert seen == [(model.POD, "blue", "web")]
    assert cluster.lookup_pod("blue", "web") is None
    assert cluster.lookup_nad("blue", "macvlan-conf") is not None
