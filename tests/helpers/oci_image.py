#!/usr/bin/env python3
"""Writes a small OCI image layout for the image import tests (image_import.sh).

Usage: oci_image.py OUTDIR BUSYBOX [--escape] [--hardlink-escape]

Layer 1 (gzip): busybox and a few applet links, /etc/passwd with user agent
(1001:1001), gone.txt, keep.txt, opq/old.txt, a setuid file
/usr/local/bin/suid (mode 4755), /work owned by agent.
Layer 2 (plain tar): a whiteout of gone.txt, opq/ made opaque with
opq/new.txt, a symlink link -> keep.txt.
--escape adds a layer whose member is ../escape.txt; --hardlink-escape one
with a hard link to ../../etc/passwd.
The config: Env, WorkingDir /work, User agent, an Entrypoint that prints
its uid, cwd, $GREETING and arguments, and a Cmd of two arguments.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def entry(tar, name, kind="file", data=b"", mode=0o644, uid=0, gid=0, link=""):
    info = tarfile.TarInfo(name)
    info.mtime = 1700000000
    info.uid, info.gid, info.mode = uid, gid, mode
    if kind == "dir":
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, link
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def layer(build):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    return buf.getvalue()


def main():
    out, busybox = sys.argv[1], sys.argv[2]
    flags = set(sys.argv[3:])
    bb = open(busybox, "rb").read()

    def base(tar):
        for d in ("bin", "etc", "opq", "usr", "usr/local", "usr/local/bin", "tmp"):
            entry(tar, d, "dir", mode=0o755 if d != "tmp" else 0o1777)
        entry(tar, "bin/busybox", data=bb, mode=0o755)
        for applet in ("sh", "ls", "cat", "stat", "id", "readlink", "env", "pwd", "echo", "test"):
            entry(tar, "bin/" + applet, "symlink", link="busybox")
        entry(tar, "etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nagent:x:1001:1001::/work:/bin/sh\n")
        entry(tar, "etc/group", data=b"root:x:0:\nagent:x:1001:\n")
        entry(tar, "gone.txt", data=b"deleted by the upper layer\n")
        entry(tar, "keep.txt", data=b"kept\n")
        entry(tar, "opq/old.txt", data=b"hidden by the opaque directory\n")
        entry(tar, "usr/local/bin/suid", data=b"#!/bin/sh\necho suid\n", mode=0o4755)
        entry(tar, "work", "dir", mode=0o755, uid=1001, gid=1001)

    def upper(tar):
        entry(tar, ".wh.gone.txt")
        entry(tar, "opq", "dir", mode=0o755)
        entry(tar, "opq/.wh..wh..opq")
        entry(tar, "opq/new.txt", data=b"new\n")
        entry(tar, "link", "symlink", link="keep.txt")

    layers = [(layer(base), True), (layer(upper), False)]
    if "--escape" in flags:
        layers.append((layer(lambda t: entry(t, "../escape.txt", data=b"escaped\n")), False))
    if "--hardlink-escape" in flags:
        layers.append((layer(lambda t: entry(t, "passwd-link", "hardlink", link="../../etc/passwd")), False))

    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        with open(os.path.join(out, "blobs", "sha256", d), "wb") as f:
            f.write(data)
        return "sha256:" + d, len(data)

    descs, diff_ids = [], []
    for raw, compress in layers:
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        data = gzip.compress(raw, mtime=0) if compress else raw
        digest, size = blob(data)
        media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
        descs.append({"mediaType": media, "digest": digest, "size": size})
    config = {
        "created": "2024-01-02T03:04:05Z",
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello from the image"],
            "WorkingDir": "/work",
            "User": "agent",
            # Says who, where and with what it runs, then its arguments.
            "Entrypoint": ["/bin/sh", "-c", 'echo "$(id -u) $PWD $GREETING: $*"', "entry"],
            "Cmd": ["default", "cmd"],
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    cdigest, csize = blob(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": csize},
        "layers": descs,
    }
    mdigest, msize = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": mdigest, "size": msize,
            "annotations": {"org.opencontainers.image.ref.name": "latest"},
        }],
    }
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)


if __name__ == "__main__":
    main()
