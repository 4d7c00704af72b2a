"""Images through the API, sync and through .aio: import, ls, inspect, rm, and a
sandbox on an imported image running its Entrypoint and Cmd as docker run does.

The image is laid out by tests/helpers/oci_image.py (as in
tests/integration/image_import.sh): Env GREETING, WorkingDir /work, User
agent (1001), an Entrypoint that prints its uid, cwd, $GREETING and
arguments, and Cmd ["default", "cmd"].
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from sandweave import Image, NotFound, Sandbox, UsageError

HELPER = Path(__file__).resolve().parents[2] / "tests" / "helpers" / "oci_image.py"
OWN = "1001 /work hello from the image"


@pytest.fixture(scope="module")
def oci_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("skopeo") is None or shutil.which("umoci") is None:
        pytest.skip("image import needs skopeo and umoci")
    out = tmp_path_factory.mktemp("oci") / "layout"
    subprocess.run([sys.executable, str(HELPER), str(out), "/bin/busybox"], check=True)
    yield str(out)


def test_image_import_ls_inspect_rm(state_dir: str, oci_dir: str) -> None:
    img = Image.import_("py-web", f"oci:{oci_dir}")
    try:
        assert img.name == "py-web"
        assert img.source == f"oci:{oci_dir}"
        assert img.layers == 2 and img.created == "2024-01-02T03:04:05Z"
        assert img.digest is not None and img.digest.startswith("sha256:")
        assert img.bytes > 100000
        assert img.config is not None and img.config["uid_gid"] == "1001:1001"
        assert img.config["cmd"] == ["default", "cmd"]
        assert "py-web" in [i.name for i in Image.ls()]
        again = Image.inspect("py-web")
        assert again.info == img.info

        with pytest.raises(UsageError, match="already exists"):
            Image.import_("py-web", f"oci:{oci_dir}")
        assert Image.import_("py-web", f"oci:{oci_dir}", force=True).name == "py-web"
    finally:
        img.rm()
    assert "py-web" not in [i.name for i in Image.ls()]
    with pytest.raises(NotFound):
        Image.inspect("py-web")
    with pytest.raises(NotFound):
        img.rm()
    img.rm(missing_ok=True)


@pytest.mark.parametrize(
    "source, message",
    [
        ("docker://busybox", "unknown transport 'docker'"),
        ("oci-archive:/nonexistent/img.tar", "No such file"),
    ],
)
def test_image_import_bad_input(state_dir: str, source: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Image.import_("py-bad", source)
    assert "py-bad" not in [i.name for i in Image.ls()]


def test_image_run_uses_entrypoint_and_cmd(state_dir: str, oci_dir: str) -> None:
    img = Image.import_("py-ep", f"oci:{oci_dir}")
    try:
        with Sandbox(template={"image": "py-ep"}) as env:
            assert env.spec["cmd"] == ["default", "cmd"]
            assert env.spec["origin"]["/entrypoint"] == "image py-ep"
            r = env.run()
            assert (r.exit_code, r.stdout) == (0, OWN + ": default cmd\n")
            assert env.run(["one", "two"]).stdout == OWN + ": one two\n"
            assert env.run(["x"], user="0:0", cwd="/tmp", env={"GREETING": "kw"}).stdout == "0 /tmp kw: x\n"
            # A string is a shell command, not the entrypoint's argument.
            assert env.run('echo "$GREETING"').stdout == "hello from the image\n"
            assert env.run(["/bin/id", "-u"], entrypoint=[]).stdout == "1001\n"
            assert env.run(["a", "b"], entrypoint=["/bin/echo"]).stdout == "a b\n"
            with pytest.raises(UsageError, match="no command given"):
                env.run(entrypoint=[])
            with pytest.raises(TypeError):
                env.run(["x"], entrypoint="/bin/echo")  # type: ignore[arg-type]
            chunks = [d for _, d in env.stream(["streamed"])]
            assert b"".join(chunks) == (OWN + ": streamed\n").encode()
        with Sandbox(template="base") as plain:
            with pytest.raises(UsageError, match="has none of its own"):
                plain.run()
    finally:
        img.rm()


def test_image_aio(state_dir: str, oci_dir: str) -> None:
    async def main() -> None:
        img = await Image.import_.aio("py-aio", f"oci:{oci_dir}")
        try:
            names = [i.name for i in await Image.ls.aio()]
            assert "py-aio" in names
            assert (await Image.inspect.aio("py-aio")).config == img.config
            env = await Sandbox.create.aio(template={"image": "py-aio"})
            try:
                r = await env.run.aio()
                assert r.stdout == OWN + ": default cmd\n"
            finally:
                await env.close.aio()
        finally:
            await img.rm.aio()
        with pytest.raises(NotFound):
            await Image.inspect.aio("py-aio")

    asyncio.run(main())


def test_image_build_base(state_dir: str) -> None:
    img = Image.build("base")
    assert img.name == "base" and img.source == "recipe base" and img.config is None
    assert Image.build.__doc__ and "recipe" in Image.build.__doc__
