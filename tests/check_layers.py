#!/usr/bin/env python3
"""Fails when a file under lib/ includes a layer above its own, or across.

The layers, lowest first, and what each may include (besides itself). This
table and lib/CMakeLists.txt say the same thing: CMake links only downward,
this check keeps the #include lines honest too (a header-only upward include
would otherwise compile and quietly tangle the layers).
"""
import pathlib
import re
import sys

ALLOWED = {
    "core": set(),
    "spec": {"core"},
    "audit": {"core"},
    "runtime": {"core", "spec"},
    "store": {"core", "spec"},
    "sandbox": {"core", "spec", "audit", "runtime", "store"},
    "api": {"core", "spec", "audit", "runtime", "store", "sandbox"},
    "rpc": {"core", "spec", "audit", "runtime", "store", "sandbox", "api"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"lib/([a-z_]+)/')


def main(root: pathlib.Path) -> int:
    problems = []
    lib = root / "lib"
    for layer_dir in sorted(p for p in lib.iterdir() if p.is_dir()):
        layer = layer_dir.name
        if layer not in ALLOWED:
            problems.append(f"lib/{layer}/: not a known layer (add it to {__file__})")
            continue
        for f in sorted(layer_dir.rglob("*")):
            if f.suffix not in (".cpp", ".hpp", ".h", ".cc"):
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == layer:
                    continue
                if m.group(1) not in ALLOWED[layer]:
                    problems.append(f"{f.relative_to(root)}:{n}: layer '{layer}' includes "
                                    f"'{m.group(1)}' ({line.strip()})")
    for f in sorted(lib.glob("*.[ch]pp")):
        problems.append(f"{f.relative_to(root)}: every lib/ file belongs to a layer directory")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()))
