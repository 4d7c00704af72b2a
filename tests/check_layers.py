#!/usr/bin/env python3
"""Fails when an #include crosses the project's layers the wrong way.

The folders, and what a file in each may include of the project:

  wire/     what host and guest share (the agent's frames, the copy stream,
            byte order): nothing of the project but wire/ itself.
  guest/    the guest init and agent (C, built against musl): guest/ and wire/.
  lib/L/    layer L of lib/, lowest first in LIB_ALLOWED: itself, the layers
            LIB_ALLOWED names, and wire/. Never cmd/ or guest/.
  cmd/      the verbs: cmd/, the API (CMD_ALLOWED) and the few lower headers
            CMD_ALLOWED and CMD_EXCEPTIONS name, each with its reason.
  helper/   the per-sandbox helper binary (the audit writer, the shim): worker
            code below the API, lib/sandbox and lower, never cmd/.

Within lib/, the client's side of the API (CLIENT_SIDE: the wire types, the
interface, what runs over any Api, the JSON-RPC client) includes nothing of
the worker: no LocalApi, and of lib/sandbox only the records it carries.

lib/CMakeLists.txt says the same for lib/: CMake links only downward, this
check keeps the #include lines honest too (a header-only upward include would
otherwise compile and quietly tangle the layers). Both spellings are read,
"x" and <x>, and a quoted include is resolved as the compiler does: against
the including file's folder first, then the source root.

Exit status 0 when every include is allowed, 1 with one line per offending
include, 2 with one line when the check cannot run.
"""
import os
import pathlib
import re
import sys

LIB_ALLOWED = {
    "core": set(),
    "options": {"core"},
    "audit": {"core"},
    "runtime": {"core", "options"},
    "store": {"core", "options"},
    "sandbox": {"core", "options", "audit", "runtime", "store"},
    "api": {"core", "options", "audit", "runtime", "store", "sandbox"},
    "rpc": {"core", "options", "audit", "runtime", "store", "sandbox", "api"},
    "controller": {"core", "options", "audit", "runtime", "store", "sandbox", "api", "rpc"},
    # Batch episodes: a client of the API, like a verb (never the worker's code).
    "batch": {"core", "audit", "api"},
    # `sandweave e2b`: an HTTP face over any Api (a client of the API, like batch).
    "e2b": {"core", "audit", "api", "rpc"},
}

# What any verb may include below cmd/: the API a verb calls, and the
# utilities every program needs whichever connection it has.
CMD_ALLOWED = {
    "lib/api/types.hpp": "the requests and results",
    "lib/api/api.hpp": "the interface a verb calls",
    "lib/api/fields.hpp": "the JSON of the requests and results",
    "lib/core/error.hpp": "errors and their exit codes",
    "lib/core/log.hpp": "logging to stderr",
    "lib/core/progress.hpp": "progress on stderr",
    "lib/core/fd.hpp": "descriptors (stdin, a terminal)",
    "lib/core/units.hpp": "durations and sizes in flags",
    "lib/core/build_info.hpp": "this binary's own version",
    "lib/core/json_input.hpp": "flags checked for UTF-8 where they come in, before any connection",
}

# One file each, for what is not an API operation.
CMD_EXCEPTIONS = {
    "cmd/common.cpp": {
        # The one place the CLI opens its connection (Session).
        "lib/api/local.hpp": "a local connection is a LocalApi",
        "lib/sandbox/context.hpp": "... on a Context of this host",
        "lib/core/host.hpp": "... acting on this host",
        "lib/rpc/client.hpp": "an ssh:// connection is an RpcClient",
        "lib/rpc/ssh.hpp": "... over ssh",
        "lib/rpc/tls.hpp": "... or over TLS to a controller (weave://)",
    },
    "cmd/controller.cpp": {
        "lib/controller/controller.hpp": "`sandweave controller` is the controller",
        "lib/controller/identity.hpp": "`controller token` manages the controller's client tokens",
    },
    "cmd/e2b.cpp": {
        "lib/e2b/e2b.hpp": "`sandweave e2b` is the E2B-compatible server (a client of the API)",
    },
    "cmd/batch.cpp": {
        "lib/batch/batch.hpp": "`sandweave batch` is the batch runner (a client of the API)",
    },
    "cmd/serve.cpp": {
        "lib/rpc/server.hpp": "`sandweave serve` is the server",
    },
    "cmd/worker.cpp": {
        "lib/rpc/worker.hpp": "`sandweave worker` is a Weave node's daemon",
    },
    "cmd/audit.cpp": {
        "lib/audit/audit.hpp": "`audit verify` checks a file on this host, offline",
    },
    "cmd/main.cpp": {
        # The binary's hidden entry points for its own helper processes,
        # started by the worker, not by a user: they run worker code.
        "lib/runtime/shim.hpp": "__shim",
        "lib/core/host.hpp": "__pool-refill and __audit-writer act on this host",
        "lib/sandbox/pool.hpp": "__pool-refill",
        "lib/audit/audit.hpp": "__audit-writer",
        "lib/rpc/socket_relay.hpp": "__relay (a Weave controller's step into a job)",
    },
}

# The API as a client sees it (a remote connection included) ...
CLIENT_SIDE = {
    "lib/api/types.hpp", "lib/api/api.hpp", "lib/api/fields.hpp", "lib/api/fields.cpp",
    "lib/api/codecs.cpp", "lib/api/one_shot.cpp", "lib/api/client_export.cpp",
    "lib/rpc/client.hpp", "lib/rpc/client.cpp", "lib/rpc/jsonrpc.hpp", "lib/rpc/jsonrpc.cpp",
    "lib/rpc/ssh.hpp", "lib/rpc/ssh.cpp", "lib/rpc/libssh_lazy.cpp",
    "lib/rpc/tls.hpp", "lib/rpc/tls.cpp",
}
# ... and the one worker header it may include: plain data, no operations.
CLIENT_MAY_INCLUDE = {"lib/sandbox/records.hpp"}
# Layers that are clients of the API as a whole (over any connection), held
# to the same rule.
CLIENT_LAYERS = {"batch", "e2b"}

SOURCES = (".c", ".h", ".cpp", ".hpp", ".cc")
FOLDERS = ("wire", "guest", "lib", "cmd", "helper")
HELPER_LAYERS = {"core", "options", "audit", "runtime", "store", "sandbox"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def resolve(root: pathlib.Path, f: pathlib.Path, quote: str, target: str):
    """The included file as a path relative to root, or None for a system header."""
    candidates = []
    if quote == '"':
        candidates.append(f.parent / target)
    candidates.append(root / target)
    for c in candidates:
        if c.is_file():
            rel = os.path.relpath(os.path.normpath(c), root)
            return None if rel.startswith("..") else pathlib.PurePosixPath(rel)
    # Not there (yet): a project path by its spelling, else a system header.
    for c in candidates:
        rel = os.path.relpath(os.path.normpath(c), root)
        if not rel.startswith("..") and rel.split(os.sep)[0] in FOLDERS:
            return pathlib.PurePosixPath(rel)
    return None


def problem_of(src: pathlib.PurePosixPath, inc: pathlib.PurePosixPath):
    """Why `src` may not include `inc`, or None when it may."""
    top, inc_top = src.parts[0], inc.parts[0]
    if inc_top not in FOLDERS:
        return None  # tests/, tools/, generated headers: not layered
    if top == "wire":
        return None if inc_top == "wire" else "wire/ includes nothing of the project"
    if top == "guest":
        return None if inc_top in ("guest", "wire") else "guest/ includes only guest/ and wire/"
    if top == "lib":
        layer = src.parts[1]
        if inc_top == "wire":
            return None
        if inc_top != "lib":
            return f"lib/ includes {inc_top}/"
        dep = inc.parts[1] if len(inc.parts) > 2 else ""
        if dep != layer and dep not in LIB_ALLOWED[layer]:
            return f"layer '{layer}' includes '{dep}'"
        client = str(src) in CLIENT_SIDE or layer in CLIENT_LAYERS
        if client and str(inc) not in CLIENT_MAY_INCLUDE and (
                dep == "sandbox" or str(inc) == "lib/api/local.hpp"):
            return f"the client side of the API includes the worker's {inc}"
        return None
    if top == "cmd":
        if inc_top == "cmd" or str(inc) in CMD_ALLOWED:
            return None
        if str(inc) in CMD_EXCEPTIONS.get(str(src), {}):
            return None
        return f"cmd/ goes around the API to {inc}"
    if top == "helper":
        if inc_top in ("helper", "wire"):
            return None
        if inc_top == "lib" and len(inc.parts) > 2 and inc.parts[1] in HELPER_LAYERS:
            return None
        return f"helper/ includes {inc} (only lib/sandbox and lower)"
    return None


def main(root: pathlib.Path) -> int:
    missing = [d for d in FOLDERS if not (root / d).is_dir()]
    if missing:
        print(f"check_layers: cannot run: {root} has no {', '.join(d + '/' for d in missing)}")
        return 2
    problems = []
    for layer_dir in sorted(p for p in (root / "lib").iterdir() if p.is_dir()):
        if layer_dir.name not in LIB_ALLOWED:
            problems.append(f"lib/{layer_dir.name}/: not a known layer (add it to {__file__})")
    for f in sorted((root / "lib").iterdir()):
        if f.is_file() and f.suffix in SOURCES:
            problems.append(f"lib/{f.name}: every lib/ file belongs to a layer directory")
    for folder in FOLDERS:
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in SOURCES or not f.is_file():
                continue
            src = pathlib.PurePosixPath(f.relative_to(root).as_posix())
            if src.parts[0] == "lib" and (len(src.parts) < 3 or src.parts[1] not in LIB_ALLOWED):
                continue  # reported above
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = resolve(root, f, m.group(1), m.group(2))
                why = problem_of(src, inc) if inc else None
                if why:
                    problems.append(f"{src}:{n}: {why} ({line.strip()})")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()))
