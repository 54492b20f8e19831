"""The pod sandbox image of tests/node, built from source with no registry.

`build_pause(out)` compiles `pause.c` statically; `write_image_archive(...)` packs it as an OCI
image layout (one gzip layer holding `/pause`, a config whose entrypoint is `/pause`, a manifest
and an `index.json` naming the image with `io.containerd.image.name`) inside a tar archive, the
form `ctr images import` reads. Every byte is deterministic: the same binary gives the same
digests, so the image name carries the manifest digest's prefix.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import platform
import tarfile
from pathlib import Path
from typing import Any

from tests import static_c

PAUSE_SOURCE = Path(__file__).with_name("pause.c")
IMAGE_REPOSITORY = "localhost/netattach-test/pause"

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# The OCI architecture names of the machines this tier runs on.
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclasses.dataclass(frozen=True, slots=True)
class Blob:
    digest: str  # sha256:<hex>
    data: bytes

    @classmethod
    def of(cls, data: bytes) -> Blob:
        return cls(f"sha256:{hashlib.sha256(data).hexdigest()}", data)

    def descriptor(self, media_type: str) -> dict[str, Any]:
        return {"mediaType": media_type, "digest": self.digest, "size": len(self.data)}


def build_pause(out: Path) -> Path:
    """`gcc -static` pause.c into `out`; a failure names the compiler's complaint."""
    return static_c.build(PAUSE_SOURCE, out)


def _tar_member(archive: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    archive.addfile(info, io.BytesIO(data))


def _json(raw: dict[str, Any]) -> bytes:
    return json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()


def _layer(pause: bytes) -> tuple[Blob, str]:
    """The gzip layer holding `/pause`, and its diff ID (the uncompressed tar's digest)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _tar_member(archive, "pause", pause, 0o755)
    tar = raw.getvalue()
    return Blob.of(gzip.compress(tar, mtime=0)), Blob.of(tar).digest


def image_blobs(pause: bytes) -> tuple[Blob, list[Blob]]:
    """The manifest, and every blob of the image (manifest included)."""
    layer, diff_id = _layer(pause)
    arch = ARCHITECTURES.get(platform.machine(), platform.machine())
    config = Blob.of(
        _json(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Entrypoint": ["/pause"]},
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            }
        )
    )
    manifest = Blob.of(
        _json(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": config.descriptor(CONFIG_TYPE),
                "layers": [layer.descriptor(LAYER_TYPE)],
            }
        )
    )
    return manifest, [layer, config, manifest]


def write_image_archive(pause: Path, out: Path) -> str:
    """The OCI image layout of the sandbox image, as a tar at `out`; the image's name."""
    manifest, blobs = image_blobs(pause.read_bytes())
    name = f"{IMAGE_REPOSITORY}:{manifest.digest.removeprefix('sha256:')[:12]}"
    tag = name.rsplit(":", 1)[1]
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                **manifest.descriptor(MANIFEST_TYPE),
                # containerd names the imported image after this annotation
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _tar_member(archive, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644)
        _tar_member(archive, "index.json", _json(index), 0o644)
        for blob in blobs:
            _tar_member(
                archive, f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", blob.data, 0o644
            )
    return name
