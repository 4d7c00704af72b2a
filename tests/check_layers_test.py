#!/usr/bin/env python3
"""tests/check_layers.py against planted back-edges.

Copies the source files of wire/, guest/, lib/, cmd/ and helper/ into a scratch tree,
checks that the copy passes, then plants one forbidden #include at a time (in
each spelling the check reads) and checks that the script fails, naming the
file and line. Usage: check_layers_test.py SOURCE_DIR
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHECK = HERE / "check_layers.py"
FOLDERS = ("wire", "guest", "lib", "cmd", "helper")

# (file to plant in, the include line, why it is a back-edge)
PLANTS = [
    ("lib/core/error.hpp", '#include "lib/api/api.hpp"', "core includes api"),
    ("lib/core/fd.hpp", "#include <lib/sandbox/context.hpp>", "core includes sandbox, <...>"),
    ("lib/store/state.hpp", '#include "../api/types.hpp"', "store includes api, relative"),
    ("lib/core/log.cpp", '#include "cmd/common.hpp"', "lib includes cmd"),
    ("lib/core/agent_wire.hpp", '#include "guest/agent.h"', "lib includes guest"),
    ("lib/api/api.hpp", '#include "lib/sandbox/sandbox.hpp"', "the interface includes the worker"),
    ("lib/rpc/client.hpp", '#include "lib/api/local.hpp"', "the rpc client includes LocalApi"),
    ("cmd/snapshot.cpp", '#include "lib/sandbox/snapshot.hpp"', "a verb around the API"),
    ("cmd/completion.cpp", "#include <lib/sandbox/image.hpp>", "a verb around the API, <...>"),
    ("cmd/create.cpp", '#include "lib/api/local.hpp"', "a verb making its own connection"),
    ("guest/init.c", '#include "../lib/core/error.hpp"', "guest includes lib, relative"),
    ("guest/agent.c", '#include "lib/core/fd.hpp"', "guest includes lib"),
    ("wire/copy.c", '#include "../guest/agent.h"', "wire includes guest, relative"),
    ("wire/byte_order.h", '#include "lib/core/error.hpp"', "wire includes lib"),
    ("helper/main.cpp", '#include "lib/api/local.hpp"', "the helper includes the API's worker side"),
    ("helper/main.cpp", '#include "cmd/common.hpp"', "the helper includes cmd"),
]


def run(root: pathlib.Path):
    r = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def copy_tree(src: pathlib.Path, dst: pathlib.Path):
    for folder in FOLDERS:
        shutil.copytree(src / folder, dst / folder,
                        ignore=shutil.ignore_patterns("*.o", "*.a", "__pycache__"))


def main(source: pathlib.Path) -> int:
    failures = []
    with tempfile.TemporaryDirectory(prefix="sw-layers.") as tmp:
        clean = pathlib.Path(tmp) / "clean"
        copy_tree(source, clean)
        rc, out = run(clean)
        if rc != 0:
            failures.append(f"the unchanged tree fails (status {rc}):\n{out}")
        for n, (path, line, why) in enumerate(PLANTS):
            tree = pathlib.Path(tmp) / f"plant{n}"
            copy_tree(source, tree)
            f = tree / path
            if not f.is_file():
                failures.append(f"{path}: not in the tree; the plant list is out of date")
                continue
            text = f.read_text()
            # After the first line: a header's #pragma once / include guard stays first.
            first, _, rest = text.partition("\n")
            f.write_text(first + "\n" + line + "\n" + rest)
            rc, out = run(tree)
            if rc != 1 or f"{path}:2:" not in out:
                failures.append(f"{why}: {path} with {line!r} gave status {rc}, "
                                f"expected 1 naming {path}:2:\n{out}")
        rc, out = run(pathlib.Path(tmp) / "nowhere")
        lines = out.strip().splitlines()
        if rc != 2 or len(lines) != 1 or "cannot run" not in lines[0]:
            failures.append(f"a tree without sources gave status {rc}, expected 2 and one line:\n{out}")
    for f in failures:
        print(f)
    print(f"check_layers_test: {len(PLANTS)} back-edges planted, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: check_layers_test.py SOURCE_DIR")
        sys.exit(2)
    sys.exit(main(pathlib.Path(sys.argv[1]).resolve()))
