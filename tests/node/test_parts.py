"""The tier's own parts, without a runtime: the sandbox image archive, containerd's config, and
the DaemonSet's pod spec turned into `ctr run` arguments. What the other tests of tests/node
rely on, checked where a mistake would be cheap to see."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.node import conftest as conftest_module
from tests.node import containerd as containerd_module
from tests.node import daemonset, sandbox_image
from tests.node.containerd import CNI_PLUGINS, Containerd


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        found = {}
        for info in tar.getmembers():
            stream = tar.extractfile(info)
            assert stream is not None
            found[info.name] = stream.read()
        return found


def test_the_sandbox_image_is_an_oci_layout_named_for_containerd(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    pause.write_bytes(b"\x7fELF not really")
    name = sandbox_image.write_image_archive(pause, tmp_path / "image.tar")

    files = members(tmp_path / "image.tar")
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == name
    assert name.startswith(f"{sandbox_image.IMAGE_REPOSITORY}:")

    def blob(digest: str) -> bytes:
        data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
        assert f"sha256:{hashlib.sha256(data).hexdigest()}" == digest
        return data

    manifest = json.loads(blob(entry["digest"]))
    config = json.loads(blob(manifest["config"]["digest"]))
    (layer,) = manifest["layers"]
    tar = gzip.decompress(blob(layer["digest"]))
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(tar).hexdigest()}"]
    assert config["config"]["Entrypoint"] == ["/pause"]
    with tarfile.open(fileobj=io.BytesIO(tar)) as inner:
        (member,) = inner.getmembers()
        assert (member.name, member.mode) == ("pause", 0o755)
        stream = inner.extractfile(member)
        assert stream is not None
        assert stream.read() == pause.read_bytes()


def test_the_sandbox_image_is_the_same_bytes_for_the_same_program(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    pause.write_bytes(b"same")
    first = sandbox_image.write_image_archive(pause, tmp_path / "a.tar")
    second = sandbox_image.write_image_archive(pause, tmp_path / "b.tar")
    assert first == second
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


@pytest.mark.skipif(
    not (CNI_PLUGINS / "loopback").exists(), reason="needs the reference plugins' loopback"
)
def test_containerd_is_configured_apart_from_the_hosts(tmp_path: Path) -> None:
    containerd = Containerd(tmp_path / "c", "/run/netns/unused", "localhost/x:1")
    try:
        config = tomllib.loads(containerd.config.read_text())
    finally:
        containerd.cri.close()
    assert config["root"] == str(containerd.root)
    assert config["state"] == str(containerd.state)
    assert config["grpc"]["address"] == str(containerd.socket)
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "localhost/x:1"
    assert cri["cni"]["bin_dir"] == str(containerd.cni_bin_dir)
    assert cri["cni"]["conf_dir"] == str(containerd.cni_conf_dir)
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"]["Root"] == str(containerd.runc_root)
    assert (containerd.cni_bin_dir / "loopback").exists()
    assert "/var/lib/containerd" not in containerd.config.read_text()
    assert '"/run/containerd' not in containerd.config.read_text()


def test_the_daemonset_pod_becomes_one_ctr_run_with_every_mount(tmp_path: Path) -> None:
    raw = daemonset.load_one(daemonset.DAEMONSET, "DaemonSet")
    host_paths = {
        v["hostPath"]["path"]: tmp_path / v["name"]
        for v in raw["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    }
    pod = daemonset.DaemonSetPod.from_manifests(
        node_name="node-1", host_paths=host_paths, config_maps={"netattach": tmp_path / "cm"}
    )

    (container,) = raw["spec"]["template"]["spec"]["containers"]
    assert pod.command == container["command"]
    assert pod.env == {"NODE_NAME": "node-1"}
    assert (pod.host_network, pod.privileged) == (True, True)
    targets = {m.target: m for m in pod.mounts}
    for mount in container["volumeMounts"]:
        assert mount["mountPath"] in targets
    assert "ro" in targets["/etc/netattach"].options
    assert "rslave" in targets["/run/netns"].options
    # identity-mounted host paths are also at their stand-in's path, and settings move with them
    socket_dir = host_paths["/run/netattach"]
    assert targets[str(socket_dir)].source == socket_dir
    assert pod.rewrite("/run/netattach/netattach.sock") == f"{socket_dir}/netattach.sock"
    assert pod.rewrite("/host/etc/cni/net.d") == "/host/etc/cni/net.d"
    args = pod.run_args("id-1", tmp_path / "log", tmp_path / "runc")
    assert {"--net-host", "--privileged", "--env=NODE_NAME=node-1"} <= set(args)
    assert args[-len(pod.command) - 2 :] == [pod.image, "id-1", *pod.command]


def test_the_configmap_settings_are_yaml_with_the_keys_the_image_test_rewrites() -> None:
    text = daemonset.load_one(daemonset.CONFIGMAP, "ConfigMap")["data"]["settings.yaml"]
    settings = yaml.safe_load(text)
    assert settings["daemonSocket"].startswith("/run/netattach/")
    assert settings["cniBinDir"] == "/host/opt/cni/bin"
    assert settings["cniConfDir"] == "/host/etc/cni/net.d"


@pytest.mark.parametrize(
    ("required", "outcome", "said"),
    [
        (
            "1",
            {"errors": 1},
            "*NETATTACH_REQUIRE_NETNS=1 but tests/node cannot run: no containerd*",
        ),
        ("", {"skipped": 1}, "*SKIPPED*no containerd*"),
    ],
)
def test_a_machine_that_cannot_run_containerd_fails_the_tier_when_netns_is_required(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    required: str,
    outcome: dict[str, int],
    said: str,
) -> None:
    monkeypatch.setattr(containerd_module, "unavailable_reason", lambda: "no containerd here")
    monkeypatch.setattr(conftest_module, "netns_unavailable_reason", lambda: None)
    monkeypatch.setenv("NETATTACH_REQUIRE_NETNS", required)
    pytester.makeconftest("from tests.node.conftest import node_host\n")
    pytester.makepyfile("def test_a_pod(node_host):\n    pass\n")

    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")

    result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines([said])
