#!/usr/bin/env python3
"""`sandweave serve` against docs/protocol.md, with the real binary and runsc.

Run by tests/integration/serve.sh (which gives it a private state directory and
removes every sandbox afterwards). Environment:
  SANDWEAVE             the binary under test
  SANDWEAVE_STATE_DIR   the state directory (passed to serve as --state-dir)
  SERVE_TEST_SCRATCH    a scratch directory (socket dirs, audit exports, templates)
  SANDWEAVE_SOURCE_DIR  the source tree (for docs/protocol.md)

Standard library only (unittest). Every assertion message names the
expectation from docs/protocol.md it checks. The client (rpc_client.py) also
records anything the server sends against the framing and message rules
(non-JSON lines, bad base64, chunks over 64 KiB, output after run.exit, log
notifications nobody asked for...); each test fails when its connections saw any.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from rpc_client import (MAX_CHUNK, MAX_LINE, Client, ConnectionClosed, RpcError, RpcTimeout,  # noqa: E402
                        SocketServer, b64)

SW = os.environ["SANDWEAVE"]
STATE = os.environ["SANDWEAVE_STATE_DIR"]
SCRATCH = os.environ.get("SERVE_TEST_SCRATCH") or tempfile.mkdtemp(prefix="sw-serve-test.")
os.environ["SERVE_TEST_SCRATCH"] = SCRATCH  # rpc_client puts server stderr logs there
SOURCE = os.environ.get("SANDWEAVE_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(SOURCE, "docs", "protocol.md")

ID_RE = r"^sw-[0-9a-f]{12}$"
TIME_RE = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$"  # RFC 3339, UTC
SANDBOX_STATES = ("creating", "running", "stopped", "failed")
SPEC_KEYS = ("template", "image", "user", "env", "cwd", "resources", "runtime_options", "labels", "origin")
RUNTIME_OPTION_KEYS = ("hidepid", "audit", "audit_max_bytes", "platform", "network")


# --- what docs/protocol.md lists ---------------------------------------------------------------

def _doc_text():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def doc_methods():
    """Every `### `name`` under "## Methods"."""
    text = _doc_text()
    section = text.split("\n## Methods\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^### `([A-Za-z0-9_.]+)`", section, re.M)


def doc_capabilities():
    """The rows of the "Server capabilities in version 1" table."""
    text = _doc_text()
    section = text.split("Server capabilities in version 1", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


DOC_METHODS = doc_methods()
DOC_CAPABILITIES = doc_capabilities()


# --- shared state ------------------------------------------------------------------------------

class S:
    client = None  # the main connection (serve --stdio, hello done)
    sandbox = None  # a running `base` sandbox made through sandbox.create
    created = []  # every sandbox id made through serve, removed at the end
    pools = []
    snapshots = []


def spawn(**kw):
    kw.setdefault("state_dir", STATE)
    return Client.spawn(SW, **kw)


def create(client=None, timeout=120, **params):
    """sandbox.create; remembers the id for the final cleanup."""
    c = client or S.client
    sb = c.call("sandbox.create", params, timeout=timeout)
    if isinstance(sb, dict) and isinstance(sb.get("id"), str):
        S.created.append(sb["id"])
    return sb


def rm_quietly(client, sandbox_id):
    try:
        client.call("sandbox.rm", {"id": sandbox_id}, timeout=60)
    except (RpcError, RpcTimeout, ConnectionClosed):
        pass


def guest_args(client, sandbox):
    """The args of every process in the guest (busybox ps)."""
    code, out, err, _ = client.run(sandbox, ["ps", "-o", "pid,args"], timeout=30)
    if code != 0:
        raise AssertionError(f"ps in the guest failed with {code}: {err!r}")
    procs = []
    for line in out.decode("utf-8", "replace").splitlines()[1:]:
        parts = line.strip().split(None, 1)
        procs.append(parts[1] if len(parts) > 1 else "")
    return procs


def wait_guest(client, sandbox, args, present, timeout=10):
    """Polls the guest until a process with exactly these args is (or is no longer) there."""
    deadline = time.monotonic() + timeout
    while True:
        procs = guest_args(client, sandbox)
        if (args in procs) == present:
            return True, procs
        if time.monotonic() > deadline:
            return False, procs
        time.sleep(0.1)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def cli_json(*args, timeout=120):
    r = subprocess.run([SW, "--state-dir", STATE, "--json", *args], capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"sandweave --json {' '.join(args)} exited {r.returncode}: {r.stderr.decode()}")
    return json.loads(r.stdout)


def proc_gone(pid):
    """True when the pid no longer runs (gone, or a zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except FileNotFoundError:
        return True
    return st.rsplit(")", 1)[1].split()[0] in ("Z", "X")


class ServeCase(unittest.TestCase):
    maxDiff = 6000

    def setUp(self):
        self.c = S.client
        self._clients = []

    def tearDown(self):
        problems = []
        for c in self._clients:
            try:
                c.check()
            except AssertionError as e:
                problems.append(str(e))
            if c.proc is not None or c.sock is not None:
                c.close(timeout=10)
        try:
            S.client.check()
        except AssertionError as e:
            problems.append(str(e))
        if problems:
            self.fail("\n".join(problems))

    def own(self, client):
        """A connection this test opened: checked and closed in tearDown."""
        self._clients.append(client)
        return client

    # --- assertions ---

    def assertError(self, err, code, label):
        self.assertIsInstance(err, RpcError, label)
        self.assertEqual(err.code, code, f"{label}: error code (message: {err.message!r}, data: {err.data!r})")
        if code > 0:
            self.assertIsInstance(err.data, dict, f"{label}: operation errors carry data.exit_status")
            self.assertEqual(err.data.get("exit_status"), code, f"{label}: data.exit_status repeats the code")
        self.assertIsInstance(err.message, str, f"{label}: error message")
        return err

    def expectError(self, method, params, code, label, client=None, timeout=60):
        c = client or self.c
        return self.assertError(c.error_of(method, params, timeout=timeout), code, label)

    def assertTime(self, value, label):
        self.assertIsInstance(value, str, f"{label}: a string")
        self.assertRegex(value, TIME_RE, f"{label}: RFC 3339 UTC")

    def assertInt(self, value, label):
        self.assertTrue(isinstance(value, int) and not isinstance(value, bool), f"{label}: an integer, got {value!r}")

    def checkSandbox(self, sb, label, state=None):
        """The Sandbox object of docs/protocol.md, "Common objects"."""
        self.assertIsInstance(sb, dict, f"{label}: a Sandbox object")
        self.assertRegex(sb.get("id", ""), ID_RE, f"{label}: id is sw- and 12 hex digits")
        self.assertIsInstance(sb.get("name"), str, f"{label}: name is a string (empty when unnamed)")
        self.assertIn(sb.get("state"), SANDBOX_STATES, f"{label}: state")
        if state is not None:
            self.assertEqual(sb.get("state"), state, f"{label}: state")
        self.assertTime(sb.get("created_at"), f"{label}: created_at")
        if sb.get("state") == "stopped":
            self.assertTime(sb.get("stopped_at"), f"{label}: stopped_at once stopped")
        elif sb.get("state") in ("running", "creating"):
            self.assertNotIn("stopped_at", sb, f"{label}: stopped_at only once stopped")
        spec = sb.get("spec")
        self.assertIsInstance(spec, dict, f"{label}: spec is an object")
        for k in SPEC_KEYS:
            self.assertIn(k, spec, f"{label}: spec.{k}")
        self.assertIsInstance(spec.get("runtime_options"), dict, f"{label}: spec.runtime_options")
        for k in RUNTIME_OPTION_KEYS:
            self.assertIn(k, spec["runtime_options"], f"{label}: spec.runtime_options.{k}")
        self.assertIsInstance(spec.get("origin"), dict, f"{label}: spec.origin")
        for k, v in spec["origin"].items():
            self.assertRegex(v, r"^(flag|default|template .+|snapshot .+)$",
                             f"{label}: spec.origin[{k!r}] is flag, template T, snapshot S or default")
        self.assertIsInstance(sb.get("runsc"), str, f"{label}: runsc")
        self.assertIsInstance(sb.get("runtime_version"), str, f"{label}: runtime_version")
        self.assertIsInstance(sb.get("runsc_flags"), list, f"{label}: runsc_flags")
        return sb

    def checkRunResult(self, req, result, exit_code, label, timed_out=False):
        """The sandbox.run response and its one run.exit, which came before it."""
        self.assertIsInstance(result, dict, f"{label}: the result is an object")
        self.assertEqual(result.get("exit_code"), exit_code,
                         f"{label}: exit_code (stdout {bytes(req.stdout[:300])!r}, stderr {bytes(req.stderr[:300])!r}, "
                         f"message {result.get('message')!r})")
        self.assertIs(result.get("timed_out"), timed_out, f"{label}: timed_out")
        if "message" in result:
            self.assertIsInstance(result["message"], str, f"{label}: message is a string")
        self.assertEqual(len(req.exits), 1, f"{label}: exactly one run.exit notification, got {req.exits!r}")
        self.assertEqual(req.exits[0].get("exit_code"), exit_code, f"{label}: run.exit exit_code")
        self.assertIs(req.exits[0].get("timed_out"), timed_out, f"{label}: run.exit timed_out")
        kinds = [e[0] for e in req.events]
        self.assertLess(kinds.index("exit"), kinds.index("response"), f"{label}: run.exit comes before the response")

    def run_ok(self, argv, label, sandbox=None, client=None, exit_code=0, **params):
        c = client or self.c
        req = c.start_run(sandbox or S.sandbox, argv, **params)
        result = req.result(120)
        self.checkRunResult(req, result, exit_code, label)
        return bytes(req.stdout), bytes(req.stderr), result


# --- handshake ---------------------------------------------------------------------------------

class A_Handshake(ServeCase):
    def test_doc_parsed(self):
        self.assertGreaterEqual(len(DOC_METHODS), 25, f"methods parsed from {DOC}: {DOC_METHODS}")
        self.assertEqual(sorted(DOC_CAPABILITIES),
                         ["log", "progress", "run.cancel", "run.entrypoint", "run.resize", "run.signal", "run.stdin"],
                         f"capabilities parsed from {DOC}")

    def test_hello_result(self):
        c = self.own(spawn(handshake=False))
        r = c.call("hello", {"protocol": 1, "client": "serve_test 1.0", "capabilities": ["run.stdin"]})
        self.assertIsInstance(r, dict, "hello: result is an object")
        self.assertEqual(r.get("protocol"), 1, "hello: result.protocol is 1 (the lower of the two; this document is version 1)")
        self.assertIsInstance(r.get("server"), str, "hello: result.server")
        self.assertRegex(r["server"], r"^sandweave \S+$", "hello: result.server is 'sandweave VERSION'")
        caps = r.get("capabilities")
        self.assertIsInstance(caps, list, "hello: result.capabilities is an array")
        missing = [cap for cap in DOC_CAPABILITIES if cap not in caps]
        self.assertEqual(missing, [], f"hello: capabilities of version 1 the server does not offer (it offers {caps})")
        methods = r.get("methods")
        self.assertIsInstance(methods, list, "hello: result.methods is an array")
        self.assertTrue(all(isinstance(m, str) for m in methods), f"hello: methods are strings: {methods}")
        missing = [m for m in DOC_METHODS if m not in methods]
        self.assertEqual(missing, [], f"hello: methods of docs/protocol.md missing from result.methods {methods}")
        self.assertEqual(len(methods), len(set(methods)), f"hello: methods without duplicates: {methods}")
        v = c.call("version")
        self.assertEqual(r["server"], "sandweave " + str(v.get("version")), "hello: server names the version `version` reports")

    def test_hello_takes_the_lower_protocol(self):
        c = self.own(spawn(handshake=False))
        r = c.call("hello", {"protocol": 7})
        self.assertEqual(r.get("protocol"), 1, "hello with protocol 7: the result is the lower of the two (1)")
        self.assertIsInstance(c.call("version"), dict, "requests work after hello with a higher protocol")

    def test_protocol_below_1_is_refused(self):
        c = self.own(spawn(handshake=False))
        self.expectError("hello", {"protocol": 0}, -32602, "hello with protocol 0", client=c)
        self.expectError("hello", {"protocol": -1}, -32602, "hello with protocol -1", client=c)
        r = c.call("hello", {"protocol": 1})
        self.assertEqual(r.get("protocol"), 1, "hello protocol 1 after a refused hello: the connection stays usable")
        self.assertIsInstance(c.call("version"), dict, "version after the handshake")

    def test_hello_params(self):
        c = self.own(spawn(handshake=False))
        r = c.send_raw(b'{"jsonrpc":"2.0","id":"h1","method":"hello"}\n', expect_id="h1", method="hello").wait(10)
        self.assertEqual(r.get("error", {}).get("code"), -32602, f"hello without params: protocol is required: {r}")
        self.expectError("hello", {}, -32602, "hello {}: protocol is required", client=c)
        self.expectError("hello", {"protocol": "1"}, -32602, "hello with protocol \"1\" (a string)", client=c)
        self.expectError("hello", {"protocol": 1.5}, -32602, "hello with protocol 1.5 (not an integer)", client=c)
        self.expectError("hello", {"protocol": 1, "client": 5}, -32602, "hello with client 5 (not a string)", client=c)
        self.expectError("hello", {"protocol": 1, "capabilities": "log"}, -32602,
                         "hello with capabilities \"log\" (not an array)", client=c)
        self.expectError("hello", {"protocol": 1, "bogus": True}, -32602, "hello with an unknown parameter", client=c)
        self.assertEqual(c.call("hello", {"protocol": 1}).get("protocol"), 1, "a good hello after the bad ones")

    def test_request_before_hello(self):
        before = {sb["id"] for sb in self.c.call("sandbox.ls")["sandboxes"]}
        c = self.own(spawn(handshake=False))
        self.expectError("version", None, -32002, "version before hello", client=c)
        self.expectError("sandbox.create", {"name": "before-hello"}, -32002, "sandbox.create before hello", client=c)
        with self.subTest("an unknown method before hello"):
            self.expectError("no.such.method", None, -32002, "an unknown method before hello: any other request", client=c)
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["touch", "/tmp/before-hello"]}, -32002,
                         "sandbox.run before hello", client=c)
        c.hello()
        after = c.call("sandbox.ls")["sandboxes"]
        self.assertEqual({sb["id"] for sb in after} - before, set(),
                         "a request before hello changes nothing: no sandbox was created")
        self.assertNotIn("before-hello", [sb.get("name") for sb in after], "no sandbox named before-hello")
        code, out, _, _ = c.run(S.sandbox, ["sh", "-c", "test -e /tmp/before-hello && echo exists || echo absent"])
        self.assertEqual(out, b"absent\n", "a sandbox.run before hello ran nothing")


# --- methods with simple results ---------------------------------------------------------------

class B_Basics(ServeCase):
    def test_version(self):
        v = self.c.call("version")
        self.assertIsInstance(v, dict, "version: result is an object")
        self.assertIsInstance(v.get("version"), str, "version: result.version")
        self.assertRegex(v["version"], r"^\d+\.\d+\.\d+", "version: result.version")
        self.assertEqual(v.get("protocol"), 1, "version: result.protocol")
        cli = subprocess.run([SW, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        self.assertRegex(cli, r"^client: +sandweave " + re.escape(v["version"]) + r" \(git ",
                         "version: the same version `sandweave --version` prints")
        self.assertEqual(v.get("revision"), re.search(r"\(git ([^)]*)\)", cli).group(1),
                         "version: the same revision `sandweave --version` prints")
        rt = v.get("runtime")
        self.assertIsInstance(rt, dict, "version: result.runtime (runsc is installed here)")
        self.assertIsInstance(rt.get("path"), str, "version: runtime.path")
        self.assertTrue(os.access(rt["path"], os.X_OK), f"version: runtime.path {rt['path']} is executable")
        self.assertIsInstance(rt.get("version"), str, "version: runtime.version")
        self.assertEqual(self.c.call("version", {}), v, "version with params {} is version without params")

    def test_ids_of_every_kind(self):
        # "id is a string or an integer": each comes back exactly as sent.
        for rid in ("abc", "", 0, -5, 2 ** 62, "1"):
            req = self.c.send("version", id=rid)
            msg = req.wait(10)
            self.assertIn("result", msg, f"version with id {rid!r}: a result")
            self.assertEqual(json.dumps(msg["id"]), json.dumps(rid), f"version with id {rid!r}: the response carries the same id")

    def test_doctor(self):
        d = self.c.call("doctor", timeout=180)
        self.assertIsInstance(d, dict, "doctor: result is an object")
        self.assertIsInstance(d.get("ok"), bool, "doctor: ok is a boolean")
        checks = d.get("checks")
        self.assertIsInstance(checks, list, "doctor: checks is an array")
        self.assertTrue(checks, "doctor: at least one check")
        for ch in checks:
            for k, t in (("name", str), ("ok", bool), ("required", bool), ("detail", str)):
                self.assertIsInstance(ch.get(k), t, f"doctor: check {ch.get('name')!r} field {k}")
        self.assertEqual(d["ok"], all(ch["ok"] for ch in checks if ch["required"]),
                         f"doctor: ok is false exactly when a required check failed: {checks}")
        cli = cli_json("doctor")
        self.assertEqual([ch["name"] for ch in checks], [ch["name"] for ch in cli["checks"]],
                         "doctor: the same checks as `sandweave --json doctor`")

    def test_templates(self):
        ls = self.c.call("template.ls")
        self.assertIsInstance(ls.get("templates"), list, "template.ls: result.templates is an array")
        by_name = {}
        for t in ls["templates"]:
            for k in ("name", "file", "description", "builtin"):
                self.assertIn(k, t, f"template.ls: item {t.get('name')!r} field {k}")
            by_name[t["name"]] = t
        for name in ("base", "coding"):
            self.assertIn(name, by_name, f"template.ls lists the built-in {name}")
            self.assertIs(by_name[name]["builtin"], True, f"template.ls: {name} is builtin")

        show = self.c.call("template.show", {"template": "base"})
        self.assertEqual(show.get("name"), "base", "template.show base: name")
        self.assertEqual(show.get("chain"), ["base"], "template.show base: chain")
        self.assertIsInstance(show.get("resolved"), dict, "template.show base: resolved is an object")
        self.assertEqual(show["resolved"].get("image"), "base", "template.show base: resolved.image")
        origin = show.get("origin")
        self.assertIsInstance(origin, dict, "template.show base: origin is an object")
        for k, v in origin.items():
            self.assertTrue(k.startswith("/"), f"template.show: origin keys are JSON pointers: {k!r}")
            self.assertIsInstance(v, str, f"template.show: origin[{k!r}] names a template")
        self.assertEqual(origin.get("/image"), "base", "template.show base: origin of /image")
        self.expectError("template.show", {"template": "no-such-template-x"}, 4, "template.show of an unknown template")

        tdir = os.path.join(SCRATCH, "templates")
        os.makedirs(tdir, exist_ok=True)
        good = os.path.join(tdir, "serve-small.yaml")
        with open(good, "w") as f:
            f.write("description: a small template for serve_test\nextends: base\n"
                    "env:\n  SERVE_TEST: from-file\nruntime_options:\n  hidepid: 2\n")
        # The server reads no template file its client names: a client
        # validates its files itself, and sends a file's content to create.
        e = self.expectError("template.validate", {"file": good}, 2,
                             "template.validate of a file over serve is refused")
        self.assertIn("not read for a remote client", e.message, "template.validate: says why")
        self.assertNotIn("from-file", e.message, "template.validate: the file's text is not echoed")
        self.expectError("template.validate", {}, -32602, "template.validate without file")
        e = self.expectError("sandbox.create", {"template": good}, 2, "sandbox.create naming a file is refused")
        self.assertNotIn("SERVE_TEST", e.message, "sandbox.create: the file's text is not echoed")

        # template: a name, or inline JSON/YAML text (a client's file, read there).
        with open(good) as f:
            sb = create(template=f.read(), template_source="client:" + good)
        self.checkSandbox(sb, "sandbox.create from a template file's content", state="running")
        self.assertEqual(sb["spec"]["runtime_options"].get("hidepid"), 2, "created from the file: hidepid 2")
        out, _, _ = self.run_ok(["sh", "-c", "echo $SERVE_TEST"], "env from the template file", sandbox=sb["id"])
        self.assertEqual(out, b"from-file\n", "env from the template file reaches the guest")
        rm_quietly(self.c, sb["id"])
        sb = create(template='{"extends": "base", "env": {"SERVE_INLINE": "inline-json"}}')
        out, _, _ = self.run_ok(["sh", "-c", "echo $SERVE_INLINE"], "env from inline JSON", sandbox=sb["id"])
        self.assertEqual(out, b"inline-json\n", "sandbox.create with inline JSON text as template")
        rm_quietly(self.c, sb["id"])


# --- sandbox lifecycle -------------------------------------------------------------------------

class C_Lifecycle(ServeCase):
    def test_create_ls_inspect_terminate_rm(self):
        labels = {"suite": "serve", "k": "v"}
        sb = create(name="serve-named", labels=labels, hidepid=2, user="1001:1001")
        self.checkSandbox(sb, "sandbox.create", state="running")
        sid = sb["id"]
        self.assertEqual(sb["name"], "serve-named", "sandbox.create: name")
        self.assertEqual(sb["spec"]["labels"], labels, "sandbox.create: labels in spec.labels")
        self.assertEqual(sb["spec"]["runtime_options"]["hidepid"], 2, "sandbox.create hidepid 2: spec.runtime_options.hidepid")
        self.assertEqual(sb["spec"]["origin"].get("/runtime_options/hidepid"), "flag",
                         "an explicit hidepid: its origin is flag")
        self.assertEqual(sb["spec"]["user"], "1001:1001", "sandbox.create user: spec.user")
        out, _, _ = self.run_ok(["id", "-u"], "id -u with the sandbox's default user", sandbox=sid)
        self.assertEqual(out, b"1001\n", "sandbox.create user 1001:1001 is the default user of commands")

        ls = self.c.call("sandbox.ls")
        self.assertIsInstance(ls.get("sandboxes"), list, "sandbox.ls: result.sandboxes is an array")
        ids = [x.get("id") for x in ls["sandboxes"]]
        self.assertIn(sid, ids, "sandbox.ls lists the new sandbox")
        self.assertIn(S.sandbox, ids, "sandbox.ls lists the shared sandbox")
        for x in ls["sandboxes"]:
            self.checkSandbox(x, f"sandbox.ls item {x.get('id')}")

        for ref, what in ((sid, "id"), ("serve-named", "name"), (sid[:-2], "unique prefix")):
            got = self.c.call("sandbox.inspect", {"id": ref})
            self.checkSandbox(got, f"sandbox.inspect by {what}", state="running")
            self.assertEqual(got["id"], sid, f"sandbox.inspect by {what} finds the sandbox")
        got = self.c.call("sandbox.inspect", {"id": sid})
        cli = cli_json("inspect", sid)
        for k in ("id", "name", "state", "created_at", "spec", "runsc", "runsc_flags", "runtime_version"):
            self.assertEqual(got.get(k), cli.get(k), f"sandbox.inspect {k} equals `sandweave --json inspect`'s")

        self.expectError("sandbox.create", {"name": "serve-named"}, 2, "sandbox.create with a taken name")

        t = self.c.call("sandbox.terminate", {"id": sid}, timeout=120)
        self.checkSandbox(t, "sandbox.terminate", state="stopped")
        self.assertEqual(t["id"], sid, "sandbox.terminate returns the sandbox")
        t2 = self.c.call("sandbox.terminate", {"id": sid}, timeout=120)
        self.checkSandbox(t2, "sandbox.terminate again (idempotent)", state="stopped")
        self.assertEqual(t2.get("stopped_at"), t.get("stopped_at"), "terminate again: stopped_at unchanged")
        self.checkSandbox(self.c.call("sandbox.inspect", {"id": sid}), "sandbox.inspect after terminate", state="stopped")

        req = self.c.start_run(sid, ["true"])
        msg = req.wait(60)
        self.assertIn("error", msg, f"sandbox.run in a stopped sandbox is an error response: {msg}")
        self.assertIn(msg["error"]["code"], (1, 4), "sandbox.run in a stopped sandbox: code 4 or 1")
        self.assertEqual(req.exits, [], "sandbox.run in a stopped sandbox: no run.exit")

        r = self.c.call("sandbox.rm", {"id": sid}, timeout=120)
        self.assertEqual(r, {"removed": sid}, "sandbox.rm result")
        self.expectError("sandbox.inspect", {"id": sid}, 4, "sandbox.inspect after rm")
        self.assertNotIn(sid, [x["id"] for x in self.c.call("sandbox.ls")["sandboxes"]], "sandbox.ls after rm")

    def test_rm_of_a_running_sandbox(self):
        sid = create()["id"]
        self.assertEqual(self.c.call("sandbox.rm", {"id": sid}, timeout=120), {"removed": sid},
                         "sandbox.rm of a running sandbox")
        self.expectError("sandbox.inspect", {"id": sid}, 4, "sandbox.inspect after rm of a running sandbox")

    def test_prune(self):
        a = create()["id"]
        b = create()["id"]
        self.c.call("sandbox.terminate", {"id": a}, timeout=120)
        p = self.c.call("sandbox.prune", timeout=120)
        self.assertIsInstance(p.get("removed"), list, "sandbox.prune: result.removed is an array")
        self.assertIn(a, p["removed"], "sandbox.prune removes the stopped sandbox")
        self.assertNotIn(b, p["removed"], "sandbox.prune keeps a running sandbox")
        self.assertNotIn(S.sandbox, p["removed"], "sandbox.prune keeps the shared running sandbox")
        self.expectError("sandbox.inspect", {"id": a}, 4, "sandbox.inspect of a pruned sandbox")
        self.checkSandbox(self.c.call("sandbox.inspect", {"id": b}), "the running sandbox after prune", state="running")
        rm_quietly(self.c, b)

    def test_create_errors(self):
        # hidepid is "integer 0-2": 3 has the right type and a bad value ("2 (bad template or value...)").
        self.expectError("sandbox.create", {"hidepid": 3}, 2, "sandbox.create hidepid 3 (a bad value)")
        self.expectError("sandbox.create", {"hidepid": "1"}, -32602, "sandbox.create hidepid \"1\" (a wrong type)")
        self.expectError("sandbox.create", {"audit": "yes"}, -32602, "sandbox.create audit \"yes\" (a wrong type)")
        self.expectError("sandbox.create", {"labels": {"a": 1}}, -32602, "sandbox.create labels not of strings")
        self.expectError("sandbox.create", {"template": "no-such-template-x"}, 4, "sandbox.create with an unknown template")
        self.expectError("sandbox.create", {"from_snapshot": "no-such-snapshot-x"}, 4, "sandbox.create from an unknown snapshot")
        self.expectError("sandbox.create", {"colour": "blue"}, -32602, "sandbox.create with an unknown parameter")
        e = self.expectError("sandbox.inspect", {"id": "no-such-sandbox"}, 4, "sandbox.inspect of an unknown id")
        self.assertIn("no-such-sandbox", e.message, "the message names the unknown sandbox")
        self.expectError("sandbox.inspect", {"id": "sw-000000000000"}, 4, "sandbox.inspect of an unknown sw- id")
        self.expectError("sandbox.terminate", {"id": "no-such-sandbox"}, 4, "sandbox.terminate of an unknown id")
        self.expectError("sandbox.rm", {"id": "no-such-sandbox"}, 4, "sandbox.rm of an unknown id")
        req = self.c.start_run("no-such-sandbox", ["true"])
        msg = req.wait(60)
        self.assertEqual(msg.get("error", {}).get("code"), 4, f"sandbox.run in an unknown sandbox: error 4: {msg}")
        self.assertEqual(req.exits, [], "sandbox.run in an unknown sandbox: no run.exit")


# --- audit -------------------------------------------------------------------------------------

class D_Audit(ServeCase):
    def checkStatus(self, st, label, sandbox):
        self.assertIsInstance(st, dict, f"{label}: an audit status object")
        self.assertIsInstance(st.get("complete"), bool, f"{label}: complete")
        for k in ("events", "last_sequence", "bytes", "dropped"):
            self.assertInt(st.get(k), f"{label}: {k}")
        self.assertIsInstance(st.get("reasons"), list, f"{label}: reasons is an array")
        self.assertTrue(all(isinstance(r, str) for r in st["reasons"]), f"{label}: reasons are strings")
        self.assertEqual(st.get("sandbox_id"), sandbox,
                         f"{label}: the status names its sandbox in `sandbox_id` (fields: {sorted(st)})")
        self.assertIsInstance(st.get("runtime_version"), str, f"{label}: runtime_version")

    def checkExportFiles(self, path, st, label):
        for p in (path, path + ".status.json"):
            self.assertTrue(os.path.isfile(p), f"{label}: {p} exists on the worker")
            self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o600, f"{label}: {p} has mode 0600")
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(st.get("sha256"), sha256(data), f"{label}: sha256 is that of the exported bytes")
        with open(path + ".status.json") as f:
            onfile = json.load(f)
        self.assertEqual(onfile.get("sha256"), st["sha256"], f"{label}: PATH.status.json has the same sha256")
        self.assertEqual(onfile.get("complete"), st["complete"], f"{label}: PATH.status.json has the same complete")
        return data

    def test_audit_export_and_status(self):
        sb = create(audit=True)
        self.checkSandbox(sb, "sandbox.create audit true", state="running")
        sid = sb["id"]
        self.assertIs(sb["spec"]["runtime_options"]["audit"], True, "audit true: spec.runtime_options.audit")
        self.run_ok(["sh", "-c", "echo audited; ls / >/dev/null"], "a command in the audited sandbox", sandbox=sid)

        st = self.c.call("audit.status", {"id": sid})
        self.checkStatus(st, "audit.status", sid)
        self.assertIs(st["complete"], False, "audit.status is never complete")
        self.assertNotEqual(st.get("barrier"), True, "audit.status: no barrier (barrier is true only for an export)")

        self.expectError("snapshot.create", {"sandbox": sid, "kind": "memory"}, 2,
                         "snapshot.create memory of an audited sandbox")

        adir = os.path.join(SCRATCH, "audit")
        os.makedirs(adir, mode=0o700, exist_ok=True)
        live = os.path.join(adir, "live.jsonl")
        ex = self.c.call("audit.export", {"id": sid, "path": live}, timeout=180)
        self.checkStatus(ex, "audit.export of a running sandbox", sid)
        self.assertIs(ex.get("barrier"), True, "audit.export: barrier is true for an export")
        self.assertGreater(ex["events"], 0, "audit.export: events were recorded (commands ran)")
        self.checkExportFiles(live, ex, "audit.export of a running sandbox")

        t = self.c.call("sandbox.terminate", {"id": sid}, timeout=180)
        self.assertEqual(t.get("state"), "stopped", "terminate the audited sandbox")
        final = os.path.join(adir, "final.jsonl")
        ex2 = self.c.call("audit.export", {"id": sid, "path": final}, timeout=180)
        self.checkStatus(ex2, "audit.export after terminate", sid)
        self.assertIs(ex2["complete"], True, f"audit.export after terminate is complete (reasons {ex2.get('reasons')})")
        self.assertIs(ex2.get("barrier"), True, "audit.export after terminate: barrier")
        self.assertEqual(ex2["reasons"], [], "a complete export has no reasons")
        self.assertEqual(ex2["dropped"], 0, "a complete export dropped nothing")
        self.assertGreaterEqual(ex2["events"], ex["events"], "the final export has at least the events of the first")
        self.checkExportFiles(final, ex2, "audit.export after terminate")

        self.expectError("audit.export", {"id": sid}, -32602, "audit.export without path")
        self.expectError("audit.status", {"id": "no-such-sandbox"}, 4, "audit.status of an unknown sandbox")
        rm_quietly(self.c, sid)


# --- snapshots ---------------------------------------------------------------------------------

class E_Snapshots(ServeCase):
    def test_snapshot_create_ls_restore_rm(self):
        src = create()["id"]
        self.run_ok(["sh", "-c", "echo snap-marker >/root/marker"], "write a marker before the snapshot", sandbox=src)
        snap = self.c.call("snapshot.create", {"sandbox": src, "kind": "fs", "name": "serve-snap"}, timeout=180)
        self.assertIsInstance(snap, dict, "snapshot.create: a snapshot object")
        S.snapshots.append(snap.get("id"))
        self.assertIsInstance(snap.get("id"), str, "snapshot.create: id")
        self.assertEqual(snap.get("name"), "serve-snap", "snapshot.create: name")
        self.assertEqual(snap.get("kind"), "fs", "snapshot.create: kind")
        self.assertEqual(snap.get("source"), src, "snapshot.create: source is the sandbox")
        self.assertTime(snap.get("created_at"), "snapshot.create: created_at")
        self.assertInt(snap.get("bytes"), "snapshot.create: bytes")
        self.assertIsInstance(snap.get("spec"), dict, "snapshot.create: spec")
        self.assertIsInstance(snap.get("runsc"), str, "snapshot.create: runsc")
        self.assertIsInstance(snap.get("runtime_version"), str, "snapshot.create: runtime_version")

        ls = self.c.call("snapshot.ls")
        self.assertIsInstance(ls.get("snapshots"), list, "snapshot.ls: result.snapshots is an array")
        self.assertIn(snap["id"], [s.get("id") for s in ls["snapshots"]], "snapshot.ls lists the snapshot")

        restored = create(from_snapshot="serve-snap")
        self.checkSandbox(restored, "sandbox.create from_snapshot", state="running")
        self.assertIn(restored.get("from_snapshot"), (snap["id"], "serve-snap"),
                      "a restored sandbox names its snapshot in from_snapshot")
        out, _, _ = self.run_ok(["cat", "/root/marker"], "the marker in the restored sandbox", sandbox=restored["id"])
        self.assertEqual(out, b"snap-marker\n", "the restored sandbox has the files of the snapshot")
        rm_quietly(self.c, restored["id"])

        self.expectError("snapshot.create", {"sandbox": "no-such-sandbox"}, 4, "snapshot.create of an unknown sandbox")
        # A string outside fs|memory|auto: the right type, a bad value (2), like hidepid 3.
        self.expectError("snapshot.create", {"sandbox": src, "kind": "disk"}, 2, "snapshot.create kind disk (a bad value)")

        r = self.c.call("snapshot.rm", {"id": snap["id"]}, timeout=120)
        self.assertEqual(r, {"removed": snap["id"]}, "snapshot.rm result")
        self.assertNotIn(snap["id"], [s.get("id") for s in self.c.call("snapshot.ls")["snapshots"]], "snapshot.ls after rm")
        self.expectError("snapshot.rm", {"id": snap["id"]}, 4, "snapshot.rm of a removed snapshot")
        S.snapshots.remove(snap["id"])
        rm_quietly(self.c, src)


# --- pools -------------------------------------------------------------------------------------

class F_Pools(ServeCase):
    def checkPool(self, p, label, name, size):
        self.assertIsInstance(p, dict, f"{label}: a pool object")
        self.assertEqual(p.get("name"), name, f"{label}: name")
        self.assertEqual(p.get("size"), size, f"{label}: size")
        for k in ("warm", "in_use", "starting"):
            self.assertInt(p.get(k), f"{label}: {k}")
        self.assertIsInstance(p.get("options"), dict, f"{label}: options")
        self.assertTime(p.get("created_at"), f"{label}: created_at")
        # "last_error when the latest start of a member failed": absent or a string.
        if "last_error" in p:
            self.assertIsInstance(p["last_error"], str, f"{label}: last_error is a string: {p}")

    def test_pool(self):
        name = "serve-pool"
        S.pools.append(name)
        with self.subTest("pool.create"):
            try:
                p = self.c.call("pool.create", {"name": name, "size": 1}, timeout=180)
            except RpcError:
                # Reported here; the pool is then made by the CLI so that the
                # other pool methods are still checked.
                r = subprocess.run([SW, "--state-dir", STATE, "pool", "create", name, "--size", "1"],
                                   capture_output=True, text=True, timeout=180)
                self.assertEqual(r.returncode, 0, f"(fallback) sandweave pool create: {r.stderr}")
                raise
            self.checkPool(p, "pool.create", name, 1)
            self.assertEqual(p["warm"], 1, "pool.create starts every member before it returns: warm 1")
            self.assertEqual(p["in_use"], 0, "pool.create: in_use 0")

        ls = self.c.call("pool.ls")
        self.assertIsInstance(ls.get("pools"), list, "pool.ls: result.pools is an array")
        self.assertIn(name, [x.get("name") for x in ls["pools"]], "pool.ls lists the pool")

        sb = self.c.call("pool.acquire", {"name": name}, timeout=180)
        self.checkSandbox(sb, "pool.acquire", state="running")
        S.created.append(sb["id"])
        pool = sb.get("pool")
        self.assertIsInstance(pool, dict, "pool.acquire: the Sandbox has a pool object")
        self.assertEqual(pool.get("name"), name, "pool.acquire: pool.name")
        self.assertEqual(pool.get("state"), "acquired", "pool.acquire: pool.state")
        self.assertTime(pool.get("acquired_at"), "pool.acquire: pool.acquired_at")
        out, _, _ = self.run_ok(["echo", "from-pool"], "a command in the acquired sandbox", sandbox=sb["id"])
        self.assertEqual(out, b"from-pool\n", "the acquired sandbox runs commands")

        # What an acquire leaves for after its answer is done: the refill is
        # started (first acquire) or woken (second: the refill then waits for
        # a wake, else for a minute), and the claim leaves no temp file.
        def warm():
            return next(x for x in self.c.call("pool.ls")["pools"] if x.get("name") == name).get("warm")

        def refilled(label):
            deadline = time.time() + 30
            while warm() != 1 and time.time() < deadline:
                time.sleep(0.2)
            self.assertEqual(warm(), 1, label)

        refilled("the pool refills to warm 1 after an acquire over serve")
        sb2 = self.c.call("pool.acquire", {"name": name}, timeout=180)
        S.created.append(sb2["id"])
        refilled("a second acquire wakes the waiting refill: warm 1 again within 30 s")
        for got in (sb, sb2):
            left = [n for n in os.listdir(os.path.join(STATE, "sandboxes", got["id"])) if ".tmp-" in n]
            self.assertEqual(left, [], f"pool.acquire leaves no temp file in {got['id']}'s directory")
        rm_quietly(self.c, sb2["id"])

        r = self.c.call("pool.resize", {"name": name, "size": 0}, timeout=180)
        self.checkPool(r, "pool.resize to 0", name, 0)

        self.expectError("pool.acquire", {"name": "no-such-pool"}, 4, "pool.acquire of an unknown pool")
        self.expectError("pool.create", {"name": "serve-pool-big", "size": 1001}, 2, "pool.create size 1001 (0-1000)")
        self.expectError("pool.create", {"name": "serve-pool-x"}, -32602, "pool.create without size")
        self.expectError("pool.resize", {"name": name, "size": "1"}, -32602, "pool.resize size \"1\" (a wrong type)")

        r = self.c.call("pool.rm", {"name": name}, timeout=180)
        self.assertEqual(r, {"removed": name}, "pool.rm result")
        S.pools.remove(name)
        self.assertNotIn(name, [x.get("name") for x in self.c.call("pool.ls")["pools"]], "pool.ls after rm")
        self.expectError("pool.rm", {"name": name}, 4, "pool.rm of a removed pool")
        rm_quietly(self.c, sb["id"])


# --- images (in a state directory of their own) ------------------------------------------------

class G_Images(ServeCase):
    def test_image_build_ls_rm(self):
        state2 = tempfile.mkdtemp(prefix="images-state.", dir=SCRATCH)
        try:
            c = self.own(spawn(state_dir=state2, capabilities=["log"]))
            ls0 = c.call("image.ls")
            self.assertIsInstance(ls0.get("images"), list, "image.ls: result.images is an array")
            req = c.send("image.build", {"name": "base"})
            b = req.result(600)
            self.assertEqual(b.get("name"), "base", "image.build: name")
            self.assertIsInstance(b.get("rootfs"), str, "image.build: rootfs")
            self.assertTrue(os.path.isdir(b["rootfs"]), f"image.build: rootfs {b['rootfs']} is a directory on the worker")
            self.assertInt(b.get("bytes"), "image.build: bytes")
            self.assertGreater(b["bytes"], 0, "image.build: bytes")
            self.assertTime(b.get("built_at"), "image.build: built_at")
            self.assertTrue(req.logs, "image.build logs progress, sent as log notifications to a client listing log")
            ls = c.call("image.ls")
            items = {i.get("name"): i for i in ls["images"]}
            self.assertIn("base", items, "image.ls lists the built image")
            for k in ("name", "bytes", "built_at", "rootfs"):
                self.assertIn(k, items["base"], f"image.ls item field {k}")

            # A client that did not list log gets none (rpc_client flags any as a violation).
            c2 = self.own(spawn(state_dir=state2, capabilities=[]))
            b2 = c2.call("image.build", {"name": "base", "force": True}, timeout=600)
            self.assertEqual(b2.get("name"), "base", "image.build force: name")
            self.assertGreaterEqual(b2.get("built_at", ""), b["built_at"], "image.build force: rebuilt")

            self.expectError("image.build", {"name": "no-such-image-x"}, 4, "image.build of an unknown image", client=c)
            self.expectError("image.build", {"name": "base", "force": "yes"}, -32602, "image.build force \"yes\"", client=c)
            r = c.call("image.rm", {"name": "base"}, timeout=120)
            self.assertEqual(r, {"removed": "base"}, "image.rm result")
            self.assertNotIn("base", [i.get("name") for i in c.call("image.ls")["images"]], "image.ls after rm")
            self.expectError("image.rm", {"name": "base"}, 4, "image.rm of a removed image", client=c)
        finally:
            for cl in self._clients:
                cl.close(timeout=10)
            shutil.rmtree(state2, ignore_errors=True)


# --- sandbox.run -------------------------------------------------------------------------------

class H_Run(ServeCase):
    def test_params(self):
        out, _, res = self.run_ok(["id", "-u"], "id -u as 1001:1002", user="1001:1002")
        self.assertEqual(out, b"1001\n", "sandbox.run user 1001:1002: uid")
        out, _, _ = self.run_ok(["id", "-g"], "id -g as 1001:1002", user="1001:1002")
        self.assertEqual(out, b"1002\n", "sandbox.run user 1001:1002: gid")
        out, _, _ = self.run_ok(["id", "-u"], "id -u, default user")
        self.assertEqual(out, b"0\n", "the base template's user is root")
        out, _, _ = self.run_ok(["pwd"], "pwd in /tmp", cwd="/tmp")
        self.assertEqual(out, b"/tmp\n", "sandbox.run cwd /tmp")
        out, _, _ = self.run_ok(["sh", "-c", 'echo "$A|$B|$LANG"'], "env", env=["A=1", "B=x=y"])
        self.assertEqual(out, b"1|x=y|C.UTF-8\n", "sandbox.run env is added to the sandbox's environment")
        out, _, _ = self.run_ok(["sh", "-c", 'echo "$0|$1|$#"', "a b", "$HOME;*"], "argv untouched")
        self.assertEqual(out, b"a b|$HOME;*|1\n", "argv reaches the guest untouched (no shell)")
        out, err, res = self.run_ok(["sh", "-c", "echo out; echo err >&2"], "stdout and stderr")
        self.assertEqual((out, err), (b"out\n", b"err\n"), "stdout and stderr arrive on their own streams")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["pwd"], "cwd": 5}, -32602, "sandbox.run cwd 5")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "env": "A=1"}, -32602, "sandbox.run env \"A=1\"")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "env": [1]}, -32602, "sandbox.run env [1]")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "stdin": "yes"}, -32602, "sandbox.run stdin \"yes\"")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "timeout_ms": "500"}, -32602,
                         "sandbox.run timeout_ms \"500\"")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "timeout_ms": 1.5}, -32602,
                         "sandbox.run timeout_ms 1.5 (not an integer)")
        # "integer > 0": 0 has the right type and a bad value (2, like hidepid 3).
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "timeout_ms": 0}, 2,
                         "sandbox.run timeout_ms 0 (a bad value)")
        # No argv is the sandbox's own entrypoint and cmd; a base sandbox has none (2).
        err = self.expectError("sandbox.run", {"id": S.sandbox}, 2, "sandbox.run without argv, nothing of its own")
        self.assertIn("no command given", err.message, "sandbox.run without argv: says why")
        self.expectError("sandbox.run", {"id": S.sandbox, "entrypoint": "/bin/sh"}, -32602,
                         "sandbox.run with a string entrypoint")
        self.expectError("sandbox.run", {"argv": ["true"]}, -32602, "sandbox.run without id")

    def test_exit_codes(self):
        cases = [
            ("a command exiting 7", ["sh", "-c", "exit 7"], 7),
            ("false", ["false"], 1),
            ("exit 255", ["sh", "-c", "exit 255"], 255),
            ("kill -9 $$ (128+9)", ["sh", "-c", "kill -9 $$"], 137),
            ("kill -TERM $$ (128+15)", ["sh", "-c", "kill -TERM $$"], 143),
            ("a missing program", ["no-such-program-xyz"], 127),
            ("a file that is not executable", ["/etc/passwd"], 126),
        ]
        for label, argv, want in cases:
            with self.subTest(label):
                req = self.c.start_run(S.sandbox, argv)
                res = req.result(60)
                self.checkRunResult(req, res, want, f"exit code: {label}")
                if want == 127:
                    self.assertIn("no-such-program-xyz", res.get("message", ""),
                                  "command not found: the message names the command")

    def test_timeout(self):
        t0 = time.monotonic()
        req = self.c.start_run(S.sandbox, ["sleep", "30"], timeout_ms=500)
        res = req.result(20)
        elapsed = time.monotonic() - t0
        self.checkRunResult(req, res, 124, "timeout_ms 500 on sleep 30", timed_out=True)
        self.assertGreaterEqual(elapsed, 0.45, "timeout_ms 500: not killed before 500 ms")
        self.assertLess(elapsed, 5, f"timeout_ms 500: ends promptly (took {elapsed:.1f} s)")
        gone, procs = wait_guest(self.c, S.sandbox, "sleep 30", present=False, timeout=5)
        self.assertTrue(gone, f"timeout_ms: the guest's sleep 30 is killed; guest processes: {procs}")
        out, _, _ = self.run_ok(["echo", "quick"], "timeout_ms not reached", timeout_ms=10000)
        self.assertEqual(out, b"quick\n", "timeout_ms not reached: normal output")


class I_Streams(ServeCase):
    def test_10mib_stdout_and_stderr_kept_apart(self):
        mib = 1 << 20
        # head -c, not dd: a read of /dev/urandom may be short and dd counts reads.
        prep = ("head -c 10485760 /dev/urandom >/tmp/serve-out.bin && head -c 10485760 /dev/urandom >/tmp/serve-err.bin && "
                "wc -c </tmp/serve-out.bin && wc -c </tmp/serve-err.bin && sha256sum /tmp/serve-out.bin /tmp/serve-err.bin")
        out, _, _ = self.run_ok(["sh", "-c", prep], "writing 2 x 10 MiB of random data in the guest")
        lines = out.decode().split("\n")
        self.assertEqual([ln.strip() for ln in lines[:2]], [str(10 * mib)] * 2, f"(setup) the guest files are 10 MiB: {out!r}")
        sums = {line.split()[1]: line.split()[0] for line in lines[2:] if line}
        self.assertEqual(len(sums), 2, f"guest sha256sum output: {out!r}")
        self.assertNotEqual(sums["/tmp/serve-out.bin"], sums["/tmp/serve-err.bin"], "the two files differ")
        t0 = time.monotonic()
        req = self.c.start_run(S.sandbox, ["sh", "-c", "cat /tmp/serve-out.bin & cat /tmp/serve-err.bin >&2; wait"])
        res = req.result(300)
        elapsed = time.monotonic() - t0
        self.checkRunResult(req, res, 0, "cat of 10 MiB to stdout and 10 MiB to stderr at once")
        self.assertEqual(len(req.stdout), 10 * mib, "stdout: all 10 MiB arrived")
        self.assertEqual(len(req.stderr), 10 * mib, "stderr: all 10 MiB arrived")
        self.assertEqual(sha256(bytes(req.stdout)), sums["/tmp/serve-out.bin"], "stdout is byte for byte the guest's file")
        self.assertEqual(sha256(bytes(req.stderr)), sums["/tmp/serve-err.bin"], "stderr is byte for byte the other file")
        biggest = max(n for _, n in req.chunks)
        self.assertLessEqual(biggest, MAX_CHUNK, "run.output chunks hold at most 64 KiB of decoded data")
        kinds = [e[0] for e in req.events]
        last_output = len(kinds) - 1 - kinds[::-1].index("output")
        self.assertLess(last_output, kinds.index("exit"), "run.exit comes once all output has been sent")
        sys.stderr.write(f"  (20 MiB streamed in {elapsed:.2f} s)\n")
        self.run_ok(["rm", "-f", "/tmp/serve-out.bin", "/tmp/serve-err.bin"], "removing the files")

    def test_binary_output_all_byte_values(self):
        everything = bytes(range(256))
        fmt = "".join("\\%03o" % b for b in range(256))
        out, err, _ = self.run_ok(["printf", fmt], "printf of all 256 byte values")
        self.assertEqual(out, everything, "stdout: all 256 byte values arrive unchanged")
        self.assertEqual(err, b"", "stderr stays empty")
        out, err, _ = self.run_ok(["sh", "-c", 'printf "$0" >&2', fmt], "printf of all 256 byte values to stderr")
        self.assertEqual(err, everything, "stderr: all 256 byte values arrive unchanged")
        self.assertEqual(out, b"", "stdout stays empty")
        data = everything * 1024  # 256 KiB: several chunks each way
        code, out, err, res = self.c.run(S.sandbox, ["cat"], stdin=data)
        self.assertEqual(code, 0, f"cat of binary stdin: exit code ({err!r})")
        self.assertEqual(out, data, "binary stdin comes back byte for byte through cat")

    def test_stdin_doc_example(self):
        # The example at the end of docs/protocol.md, byte for byte.
        req = self.c.start_run(S.sandbox, ["/bin/sh", "-c", "tr a-z A-Z; echo done >&2; exit 3"], stdin=True)
        r = self.c.call("run.stdin", {"request": req.id, "data": "aGVsbG8K", "eof": True})
        self.assertEqual(r, {}, "run.stdin result is {}")
        res = req.result(60)
        self.checkRunResult(req, res, 3, "the stdin example")
        self.assertEqual(bytes(req.stdout), b"HELLO\n", "the stdin example: stdout")
        self.assertEqual(bytes(req.stderr), b"done\n", "the stdin example: stderr")

    def test_stdin_chunks_then_eof(self):
        chunks = [b"first chunk\n", bytes(range(256)), os.urandom(MAX_CHUNK), b"\x00\xff" * 1000, b"last\n"]
        expected = b"".join(chunks)
        req = self.c.start_run(S.sandbox, ["cat"], stdin=True)
        for i, ch in enumerate(chunks):
            self.assertEqual(self.c.send_stdin(req, ch), {}, f"run.stdin chunk {i}: result {{}}")
        time.sleep(0.5)
        self.assertFalse(req.done, f"cat must not end before eof: {req.responses}")
        self.assertEqual(self.c.send_stdin(req, eof=True), {}, "run.stdin eof: result {}")
        res = req.result(60)
        self.checkRunResult(req, res, 0, "cat with stdin in chunks")
        self.assertEqual(bytes(req.stdout), expected, "cat saw exactly the bytes of the chunks, in order")

        data = os.urandom(300000)
        code, out, err, _ = self.c.run(S.sandbox, ["sha256sum"], stdin=data, chunk=7000)
        self.assertEqual(code, 0, f"sha256sum of stdin: exit code ({err!r})")
        self.assertEqual(out.split()[0].decode(), sha256(data), "sha256sum in the guest of 300000 bytes sent in 43 chunks")
        code, out, _, _ = self.c.run(S.sandbox, ["wc", "-c"], stdin=data[:12345], chunk=1000)
        self.assertEqual(out.strip(), b"12345", "wc -c counts exactly the bytes sent")

    def test_no_stdin_means_empty_stdin(self):
        t0 = time.monotonic()
        out, _, _ = self.run_ok(["cat"], "cat without stdin")
        self.assertEqual(out, b"", "without \"stdin\": true the command's stdin is empty")
        self.assertLess(time.monotonic() - t0, 10, "cat without stdin ends at once")

    def test_stdin_errors(self):
        self.expectError("run.stdin", {"request": 987654321, "data": b64(b"x")}, -32602, "run.stdin for an unknown request id")
        self.expectError("run.stdin", {"request": "no-such-request", "eof": True}, -32602, "run.stdin for an unknown string id")
        self.expectError("run.stdin", {"data": b64(b"x")}, -32602, "run.stdin without request")
        req = self.c.start_run(S.sandbox, ["sleep", "1"])
        self.expectError("run.stdin", {"request": req.id, "data": b64(b"x")}, -32602,
                         "run.stdin to a command whose stdin was not requested")
        self.checkRunResult(req, req.result(30), 0, "sleep 1 after a refused run.stdin")
        req = self.c.start_run(S.sandbox, ["sh", "-c", "cat >/dev/null; sleep 1"], stdin=True)
        self.c.send_stdin(req, b"x", eof=True)
        self.expectError("run.stdin", {"request": req.id, "data": b64(b"more")}, -32602,
                         "run.stdin after eof (stdin already closed)")
        self.checkRunResult(req, req.result(30), 0, "the command after a run.stdin past eof")

    def test_stdin_limit_16mib_waiting(self):
        # The command reads nothing until told to; 20 MiB are sent without
        # waiting: what is over 16 MiB waiting gets error 1 and is not appended.
        go = "/tmp/serve-stdin-go"
        req = self.c.start_run(S.sandbox, ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; wc -c"], stdin=True)
        chunk = b"\xab" * MAX_CHUNK
        data = b64(chunk)
        sends = [self.c.send("run.stdin", {"request": req.id, "data": data}) for _ in range((20 << 20) // MAX_CHUNK)]
        # Requests for one command are applied in order: once the last chunk
        # (surely beyond 16 MiB) is answered, every chunk before it was decided.
        last = sends[-1].wait(120)
        self.assertEqual(last.get("error", {}).get("code"), 1,
                         f"run.stdin of the 320th 64 KiB chunk while the command reads nothing: error 1 "
                         f"(at most 16 MiB may wait unwritten): {last}")
        acked = sum(1 for x in sends if x.responses and "result" in x.responses[0])
        self.assertLess(acked * MAX_CHUNK, 1 << 20,
                        f"run.stdin is answered once its data is written to the pipe: {acked} chunks were "
                        f"acknowledged while the command read nothing")
        self.run_ok(["touch", go], "letting the reader go")
        answers = [s.wait(120) for s in sends]
        ok = [a for a in answers if "result" in a]
        errors = [a for a in answers if "error" in a]
        codes = sorted({a["error"].get("code") for a in errors})
        self.assertEqual(codes, [1], "run.stdin beyond 16 MiB waiting: error 1")
        self.assertLessEqual(len(ok) * MAX_CHUNK, 17 << 20,
                             "at most 16 MiB may wait unwritten (plus what the stdin pipe itself holds)")
        self.assertGreaterEqual(len(ok) * MAX_CHUNK, 16 << 20, "up to 16 MiB may wait: 16 MiB are accepted")
        self.c.send_stdin(req, eof=True)
        res = req.result(120)
        self.checkRunResult(req, res, 0, "wc -c after the flood")
        self.assertEqual(int(req.stdout.strip() or b"-1"), len(ok) * MAX_CHUNK,
                         f"the command read exactly the accepted chunks ({len(ok)} x 64 KiB; {len(errors)} refused)")
        sys.stderr.write(f"  ({len(ok)} chunks of 64 KiB accepted, {len(errors)} refused) ")
        self.run_ok(["rm", "-f", go], "removing the go file")


class J_Concurrency(ServeCase):
    def test_8_concurrent_runs(self):
        t0 = time.monotonic()
        reqs = [self.c.start_run(S.sandbox, ["sh", "-c", f"sleep 1; echo {n}"]) for n in range(8)]
        v = self.c.send("version")
        v.result(10)
        version_time = v.done_at - v.sent_at
        results = [r.result(60) for r in reqs]
        elapsed = time.monotonic() - t0
        for n, (req, res) in enumerate(zip(reqs, results)):
            self.checkRunResult(req, res, 0, f"concurrent run {n}")
            self.assertEqual(bytes(req.stdout), f"{n}\n".encode(), f"concurrent run {n}: its own output")
            self.assertGreaterEqual(req.done_at - req.sent_at, 0.95, f"concurrent run {n} really slept 1 s")
        self.assertLess(elapsed, 4.0, f"8 runs of sleep 1 on one connection overlap (took {elapsed:.2f} s, 8 s if serial)")
        self.assertLess(version_time, 0.9, f"version answered while 8 runs were in flight ({version_time:.2f} s)")

    def test_responses_in_finishing_order(self):
        slow = self.c.start_run(S.sandbox, ["sh", "-c", "sleep 2; echo slow"])
        fast = self.c.start_run(S.sandbox, ["echo", "fast"])
        fast.result(30)
        self.assertFalse(slow.done, "responses come in the order requests finish: fast before slow")
        slow.result(30)
        self.assertEqual((bytes(slow.stdout), bytes(fast.stdout)), (b"slow\n", b"fast\n"), "each run its own output")


class K_CancelSignal(ServeCase):
    def test_cancel(self):
        req = self.c.start_run(S.sandbox, ["sleep", "60"])
        up, procs = wait_guest(self.c, S.sandbox, "sleep 60", present=True)
        self.assertTrue(up, f"sleep 60 started in the guest: {procs}")
        t0 = time.monotonic()
        r = self.c.call("run.cancel", {"request": req.id})
        self.assertIsInstance(r, dict, "run.cancel: result is an object")
        if "cancelled" in r:
            self.assertIs(r["cancelled"], True, f"run.cancel of a running command: {r}")
        msg = req.wait(10)
        elapsed = time.monotonic() - t0
        self.assertIn("error", msg, f"a cancelled sandbox.run ends with an error response: {msg}")
        self.assertEqual(msg["error"].get("code"), -32800, "a cancelled sandbox.run: error -32800")
        data = msg["error"].get("data")
        self.assertIsInstance(data, dict, "cancelled: error.data holds exit_code")
        self.assertEqual(data.get("exit_code"), 137, "cancelled: data.exit_code is the status it ended with (SIGKILL)")
        self.assertLess(elapsed, 5, f"run.cancel ends the run promptly (took {elapsed:.1f} s)")
        gone, procs = wait_guest(self.c, S.sandbox, "sleep 60", present=False, timeout=5)
        self.assertTrue(gone, f"after run.cancel no sleep 60 is left in the guest: {procs}")
        again = self.c.call("run.cancel", {"request": req.id})
        self.assertEqual(again, {"cancelled": False}, "run.cancel of a finished request")
        self.expectError("run.cancel", {}, -32602, "run.cancel without request")

    def test_signal_term(self):
        req = self.c.start_run(S.sandbox, ["sleep", "58"])
        up, procs = wait_guest(self.c, S.sandbox, "sleep 58", present=True)
        self.assertTrue(up, f"sleep 58 started in the guest: {procs}")
        t0 = time.monotonic()
        self.assertEqual(self.c.call("run.signal", {"request": req.id, "signal": "TERM"}), {}, "run.signal result")
        res = req.result(10)
        self.checkRunResult(req, res, 143, "run.signal TERM to sleep")
        self.assertLess(time.monotonic() - t0, 5, "run.signal TERM: the command ends promptly")

    def test_signal_by_number(self):
        script = 'trap "echo got-usr1; exit 0" USR1; echo ready; while :; do sleep 0.1; done'
        req = self.c.start_run(S.sandbox, ["sh", "-c", script])
        req.wait_output(lambda r: b"ready\n" in r.stdout, 15, "ready")
        self.assertEqual(self.c.call("run.signal", {"request": req.id, "signal": 10}), {}, "run.signal 10 result")
        res = req.result(10)
        self.checkRunResult(req, res, 0, "run.signal 10 (USR1) to a shell trapping it")
        self.assertEqual(bytes(req.stdout), b"ready\ngot-usr1\n", "the integer signal reached the command's process")
        self.expectError("run.signal", {"request": req.id}, -32602, "run.signal without signal")

    def test_tty_window_and_resize(self):
        # The pty starts at the size the client gives and follows run.resize:
        # the guest shell sees SIGWINCH and the new size.
        script = 'trap "stty size" WINCH; stty size; echo ready; while :; do sleep 0.1; done'
        req = self.c.start_run(S.sandbox, ["sh", "-c", script], tty=True, rows=33, cols=77)
        req.wait_output(lambda r: b"ready" in r.stdout, 15, "ready")
        self.assertIn(b"33 77", bytes(req.stdout), "tty with rows/cols: the pty's first size")
        self.assertEqual(self.c.call("run.resize", {"request": req.id, "rows": 40, "cols": 120}), {},
                         "run.resize result")
        req.wait_output(lambda r: b"40 120" in r.stdout, 15, "the resized window (40 120)")
        self.expectError("run.resize", {"request": req.id, "rows": 0, "cols": 80}, -32602, "run.resize rows 0")
        self.expectError("run.resize", {"request": req.id, "rows": 24, "cols": 70000}, -32602,
                         "run.resize cols 70000")
        self.expectError("run.resize", {"request": 987654, "rows": 24, "cols": 80}, -32602,
                         "run.resize of no running command")
        self.assertEqual(self.c.call("run.cancel", {"request": req.id}), {"cancelled": True}, "cancelled")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["true"], "rows": 24, "cols": 80}, 2,
                         "rows/cols without tty (a usage error, as timeout_ms 0)")


class L_BadInput(ServeCase):
    """Each bad line gets exactly one error response and the connection stays usable."""

    def setUp(self):
        super().setUp()
        self.bc = self.own(spawn())
        self.n = 900000

    def usable(self, label):
        try:
            self.bc.call("version", timeout=10)
        except (RpcError, RpcTimeout, ConnectionClosed) as e:
            self.fail(f"{label}: the connection must stay usable, but version failed: {e}")

    def bad(self, raw, code, label, id=None, id_or_null=False):
        """Sends raw; expects one error response with `code`, with id null
        (id None), or with `id` (or null too when id_or_null)."""
        c = self.bc
        c.take_null_responses()
        req = c.send_raw(raw, expect_id=id, method=label) if id is not None else c.send_raw(raw)
        if id is None:
            ok = c.wait_until(lambda: c.null_responses or c.eof, 10)
            self.assertTrue(ok and c.null_responses,
                            f"{label}: an error response with id null within 10 s{c.stderr_note()}")
            msg = c.null_responses[0]
        else:
            ok = c.wait_until(lambda: req.responses or (id_or_null and c.null_responses) or c.eof, 10)
            self.assertTrue(ok and (req.responses or c.null_responses),
                            f"{label}: an error response (id {id!r}{' or null' if id_or_null else ''}) within 10 s")
            msg = req.responses[0] if req.responses else c.null_responses[0]
        self.assertIn("error", msg, f"{label}: an error response, got {msg}")
        self.assertEqual(msg["error"].get("code"), code, f"{label}: error code (message {msg['error'].get('message')!r})")
        self.usable(label)
        extra = c.take_null_responses()[(1 if (id is None or not req.responses) else 0):]
        self.assertEqual(extra, [], f"{label}: exactly one response to the bad line")
        if req is not None:
            self.assertLessEqual(len(req.responses), 1, f"{label}: exactly one response to the bad line")
        return msg

    def next_id(self):
        self.n += 1
        return self.n

    def test_not_json(self):
        self.bad(b"this is not json\n", -32700, "a line that is not JSON")
        self.bad(b'{"jsonrpc":"2.0","id":1,"method":"version"\n', -32700, "truncated JSON")
        self.bad(b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}\n', -32700, "a line that is not UTF-8")

    def test_not_a_request_object(self):
        self.bad(b"[]\n", -32600, "a JSON array")
        self.bad(b'[{"jsonrpc":"2.0","id":5,"method":"version"}]\n', -32600, "a batch (not supported)")
        self.bad(b'"version"\n', -32600, "a JSON string")
        self.bad(b"42\n", -32600, "a JSON number")
        self.bad(b"null\n", -32600, "JSON null")

    def test_bad_jsonrpc_member(self):
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"1.0","id":{i},"method":"version"}}\n', -32600, '"jsonrpc":"1.0"', id=i, id_or_null=True)
        i = self.next_id()
        self.bad(f'{{"id":{i},"method":"version"}}\n', -32600, "no jsonrpc member", id=i, id_or_null=True)
        i = self.next_id()
        self.bad(f'{{"jsonrpc":2.0,"id":{i},"method":"version"}}\n', -32600, "jsonrpc a number", id=i, id_or_null=True)

    def test_bad_ids(self):
        self.bad(b'{"jsonrpc":"2.0","id":1.5,"method":"version"}\n', -32600, "a fractional id")
        self.bad(b'{"jsonrpc":"2.0","id":null,"method":"version"}\n', -32600, "id null")
        self.bad(b'{"jsonrpc":"2.0","id":true,"method":"version"}\n', -32600, "id true")
        self.bad(b'{"jsonrpc":"2.0","id":{},"method":"version"}\n', -32600, "id an object")
        self.bad(b'{"jsonrpc":"2.0","id":[1],"method":"version"}\n', -32600, "id an array")

    def test_bad_method_member(self):
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"2.0","id":{i}}}\n', -32600, "no method", id=i, id_or_null=True)
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"2.0","id":{i},"method":5}}\n', -32600, "method a number", id=i, id_or_null=True)
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"2.0","id":{i},"method":"no.such.method"}}\n', -32601, "an unknown method", id=i)

    def test_bad_params(self):
        c = self.bc
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": "ls"}, -32602, "argv \"ls\" (a wrong type)", client=c)
        self.usable("argv \"ls\"")
        self.expectError("sandbox.run", {"id": S.sandbox, "argv": ["ls", 5]}, -32602, "argv [\"ls\", 5]", client=c)
        self.usable("argv with a number")
        self.expectError("sandbox.inspect", {"id": 5}, -32602, "sandbox.inspect id 5 (a wrong type)", client=c)
        self.expectError("sandbox.inspect", {"id": S.sandbox, "bogus": 1}, -32602, "an unknown param", client=c)
        self.usable("an unknown param")
        self.expectError("version", {"bogus": 1}, -32602, "an unknown param of version", client=c)
        self.expectError("sandbox.inspect", {}, -32602, "a missing required param", client=c)
        self.usable("a missing required param")
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"2.0","id":{i},"method":"version","params":[]}}\n', -32602,
                 "params an array (params is an object)", id=i, id_or_null=True)
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"2.0","id":{i},"method":"version","params":"x"}}\n', -32602,
                 "params a string", id=i, id_or_null=True)
        # "omitted or null means {}".
        i = self.next_id()
        req = self.bc.send_raw(f'{{"jsonrpc":"2.0","id":{i},"method":"version","params":null}}\n',
                               expect_id=i, method="params null")
        self.assertIn("version", req.result(10), "params null is the same as omitted")

    def test_line_length_limit(self):
        i = self.next_id()
        head = f'{{"jsonrpc":"2.0","id":{i},"method":"version","params":{{"pad":"'.encode()
        tail = b'"}}'
        line = head + b"x" * (MAX_LINE - len(head) - len(tail)) + tail
        self.assertEqual(len(line), MAX_LINE)
        # Exactly 1 MiB is a line like any other: it is parsed (and pad is an unknown param).
        self.bad(line + b"\n", -32602, "a line of exactly 1 MiB is read (pad: unknown param)", id=i)
        i = self.next_id()
        head = f'{{"jsonrpc":"2.0","id":{i},"method":"version","params":{{"pad":"'.encode()
        line = head + b"x" * (MAX_LINE + 1 - len(head) - len(tail)) + tail
        self.assertEqual(len(line), MAX_LINE + 1)
        self.bad(line + b"\n", -32600, "a line of 1 MiB + 1 byte (id null)")
        # A 3 MiB line whose last bytes look like a request: none of it is answered but the -32600.
        probe = 424242
        tail_req = f'{{"jsonrpc":"2.0","id":{probe},"method":"version"}}'.encode()
        p = self.bc._register(probe, "probe", None)
        self.bad(b"y" * (3 * MAX_LINE) + tail_req + b"\n", -32600, "a 3 MiB line ending like a request")
        time.sleep(0.2)
        self.assertEqual(p.responses, [], "the tail of an over-long line is not read as a request")

    def test_deep_nesting(self):
        # Small lines (300 KB, 480 KB) that once overflowed the server's stack.
        self.bad(b"[" * 150000 + b"]" * 150000 + b"\n", -32600, "an array nested 150,000 deep")
        i = self.next_id()
        self.bad(f'{{"jsonrpc":"2.0","id":{i},"method":"version","params":'.encode()
                 + b'{"a":' * 80000 + b"1" + b"}" * 80000 + b"}\n",
                 -32600, "params nested 80,000 deep (id null: the line is not parsed)")

        def nested(depth):
            v = 1
            for _ in range(depth):
                v = {"a": v}
            return v
        # 64 levels in all (the request object, params, then 62) are read: the
        # unknown parameter is what is wrong.
        self.expectError("version", {"x": nested(62)}, -32602, "params nested 64 deep in all are parsed", client=self.bc)
        i = self.next_id()
        line = json.dumps({"jsonrpc": "2.0", "id": i, "method": "version", "params": {"x": nested(63)}})
        self.bad((line + "\n").encode(), -32600, "65 levels are refused")
        # Brackets inside strings, escaped quotes included, are not nesting.
        e = self.expectError("sandbox.inspect", {"id": '\\"' + "[{" * 50000}, 4,
                             "brackets inside a string do not count", client=self.bc)
        self.assertIn("no such sandbox", e.message, "the id with brackets was looked up")

    def test_template_file_not_utf8(self):
        path = os.path.join(SCRATCH, "not-utf8.yaml")
        with open(path, "wb") as f:
            f.write(b"extends: base\nenv:\n  GREETING: \"caf\xe9\"\n")
        # A path is refused before the file is read: named, never quoted
        # (the CLI, which reads it where it is, names the key that is not UTF-8).
        e = self.expectError("sandbox.create", {"template": path}, 2, "a template file with byte 0xE9", client=self.bc)
        self.assertIn(path, e.message, "the error names the file")
        self.assertNotIn("caf", e.message, "the file's text is not echoed")
        self.usable("a template file that is not UTF-8")

    def test_crlf_line(self):
        i = self.next_id()
        req = self.bc.send_raw(f'{{"jsonrpc":"2.0","id":{i},"method":"version"}}\r\n', expect_id=i, method="version")
        msg = req.wait(10)
        self.assertIn("result", msg, f"a request ending in \\r\\n (\\r is JSON whitespace) is answered: {msg}")

    def test_request_without_id(self):
        # Notifications are "only ever sent by the server": not specified; it must not break the connection.
        self.bc.take_null_responses()
        self.bc.send_raw(b'{"jsonrpc":"2.0","method":"version"}\n')
        self.usable("a request without id")
        for msg in self.bc.take_null_responses():
            self.assertIn("error", msg, f"a response to a request without id can only be an error: {msg}")

    def test_reused_id_in_flight(self):
        c = self.bc
        first = c.start_run(S.sandbox, ["sh", "-c", "sleep 2; echo first"])
        rid = first.id
        c.take_null_responses()
        dup = {"jsonrpc": "2.0", "id": rid, "method": "sandbox.run",
               "params": {"id": S.sandbox, "argv": ["echo", "second"]}}
        same = c.send_raw(json.dumps(dup) + "\n", expect_id=rid, method="sandbox.run (duplicate)")
        self.assertIs(same, first, "(client) the duplicate's responses are routed with the first request's")
        # The error may carry the reused id or null (see the report on docs/protocol.md).
        ok = c.wait_until(lambda: any("error" in m for m in first.responses) or c.null_responses, 5)
        self.assertTrue(ok, f"reusing an in-flight id: an error -32600 within 5 s (responses so far {first.responses})")
        self.assertFalse(any("result" in m for m in first.responses),
                         f"reused id: the error comes at once, before the first request's result: {first.responses}")
        ok = c.wait_until(lambda: any("result" in m for m in first.responses) or c.eof, 30)
        self.assertTrue(ok, f"the first request still completes: {first.responses}{c.stderr_note()}")
        time.sleep(0.2)
        errors = [m for m in first.responses if "error" in m] + c.take_null_responses()
        results = [m for m in first.responses if "result" in m]
        self.assertEqual(len(errors), 1, f"the duplicate gets exactly one response, an error: {errors}")
        self.assertEqual(errors[0]["error"].get("code"), -32600, f"reused id: error code: {errors[0]}")
        self.assertEqual(len(results), 1, f"the first request completes once: {first.responses}")
        self.assertEqual(results[0]["result"].get("exit_code"), 0, "the first request's exit_code")
        self.assertEqual(bytes(first.stdout), b"first\n", "the duplicate did not run or disturb the first request")
        self.assertEqual(len(first.exits), 1, "one run.exit, the first request's")
        again = c.send("version", id=rid)
        self.assertIn("result", again.wait(10), "an id may be reused once its response has been sent")

    def test_invalid_base64_in_run_stdin(self):
        c = self.bc
        req = c.start_run(S.sandbox, ["cat"], stdin=True)
        for bad, label in (("@@@not base64@@@", "not base64"), ("aGk", "unpadded (RFC 4648 with padding)"),
                           ("aGk=\n", "a newline inside"), ("a GVsbG8K", "a space inside"), (5, "a number")):
            self.expectError("run.stdin", {"request": req.id, "data": bad}, -32602,
                             f"run.stdin with data {label}", client=c)
            self.usable(f"invalid base64 ({label})")
        self.assertFalse(req.done, f"the command is not disturbed by bad run.stdin: {req.responses}")
        c.send_stdin(req, b"good\n", eof=True)
        res = req.result(30)
        self.checkRunResult(req, res, 0, "cat after invalid run.stdin data")
        self.assertEqual(bytes(req.stdout), b"good\n", "invalid run.stdin data appended nothing")


class M_Disconnect(ServeCase):
    def test_client_killed_mid_run(self):
        script = textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {HERE!r})
            from rpc_client import Client
            c = Client.spawn({SW!r}, state_dir={STATE!r})
            c.start_run({S.sandbox!r}, ["sleep", "300"])
            print(c.proc.pid, flush=True)
            time.sleep(600)
        """)
        client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        try:
            line = client.stdout.readline()
            self.assertTrue(line.strip().isdigit(), f"the client process printed the serve pid: {line!r}")
            serve_pid = int(line)
            up, procs = wait_guest(self.c, S.sandbox, "sleep 300", present=True)
            self.assertTrue(up, f"sleep 300 started in the guest through the doomed connection: {procs}")
            client.kill()
            client.wait(10)
            deadline = time.monotonic() + 10
            while not proc_gone(serve_pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            exited = proc_gone(serve_pid)
            if not exited:
                os.kill(serve_pid, signal.SIGKILL)
            self.assertTrue(exited, "serve --stdio exits within 10 s of its client dying")
            gone, procs = wait_guest(self.c, S.sandbox, "sleep 300", present=False, timeout=5)
            self.assertTrue(gone, f"the connection closed: the server killed its command; guest processes: {procs}")
            sb = self.c.call("sandbox.inspect", {"id": S.sandbox})
            self.assertEqual(sb.get("state"), "running", "the connection closed: the sandbox stays, running")
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
            client.stdout.close()

    def test_stdin_closed_mid_run(self):
        c2 = spawn()
        c2.start_run(S.sandbox, ["sleep", "301"])
        up, procs = wait_guest(self.c, S.sandbox, "sleep 301", present=True)
        self.assertTrue(up, f"sleep 301 started in the guest: {procs}")
        c2.close_stdin()
        try:
            c2.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        exited = c2.proc.poll() is not None
        c2.close(timeout=1)
        self.assertTrue(exited, "serve --stdio exits within 10 s of its stdin closing while a command ran")
        gone, procs = wait_guest(self.c, S.sandbox, "sleep 301", present=False, timeout=5)
        self.assertTrue(gone, f"stdin closed: the server killed its command; guest processes: {procs}")
        self.assertEqual(self.c.call("sandbox.inspect", {"id": S.sandbox}).get("state"), "running",
                         "stdin closed: the sandbox stays, running")


PEER_SCRIPT = r"""
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except PermissionError as e:
    print(json.dumps({"uid": os.getuid(), "connect": "EACCES"}))
    sys.exit(0)
s.settimeout(10)
try:
    s.sendall(b'{"jsonrpc":"2.0","id":0,"method":"hello","params":{"protocol":1}}\n')
except OSError:
    pass
data, end = b"", "eof"
while True:
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        end = "timeout"
        break
    except OSError as e:
        end = "error " + str(e)
        break
    if not chunk:
        break
    data += chunk
print(json.dumps({"uid": os.getuid(), "connect": "ok", "received": data.decode("utf-8", "replace"), "end": end}))
"""


class N_Socket(ServeCase):
    def peer_1001(self, path, caps):
        cmd = ["setpriv", "--reuid", "1001", "--regid", "1001", "--clear-groups"]
        if caps:
            cmd += ["--inh-caps", "+dac_override", "--ambient-caps", "+dac_override"]
        r = subprocess.run(cmd + ["/usr/bin/python3", "-c", PEER_SCRIPT, path], capture_output=True, text=True,
                           timeout=30, cwd="/")
        self.assertEqual(r.returncode, 0, f"the uid 1001 peer ran: {r.stderr}")
        out = json.loads(r.stdout)
        self.assertEqual(out["uid"], 1001, "the peer runs as uid 1001")
        return out

    def test_socket(self):
        sockdir = os.path.join(SCRATCH, "sock-new")
        path = os.path.join(sockdir, "sock")
        srv = SocketServer(SW, path, STATE)
        srv.start()
        try:
            st = os.stat(sockdir)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o700, "serve --socket creates the missing directory with mode 0700")
            ls = os.lstat(path)
            self.assertTrue(stat.S_ISSOCK(ls.st_mode), f"{path} is a socket")
            self.assertEqual(stat.S_IMODE(ls.st_mode), 0o600, "the socket has mode 0600")

            c1 = self.own(srv.connect())
            out, _, _ = self.run_ok(["echo", "via-socket"], "sandbox.run over the socket", client=c1)
            self.assertEqual(out, b"via-socket\n", "sandbox.run over the socket")
            c2 = self.own(srv.connect(handshake=False))
            self.expectError("version", None, -32002, "a second connection needs its own hello", client=c2)
            c2.hello()
            c1.close()
            self.assertIsInstance(c2.call("version"), dict, "connections are independent: one closing leaves the other")

            plain = self.peer_1001(path, caps=False)
            self.assertEqual(plain["connect"], "EACCES", "uid 1001 cannot reach a 0600 socket in a 0700 directory")
            peer = self.peer_1001(path, caps=True)
            self.assertEqual(peer["connect"], "ok", "uid 1001 with CAP_DAC_OVERRIDE reaches the socket")
            lines = [ln for ln in peer["received"].split("\n") if ln]
            self.assertEqual(len(lines), 1, f"a peer with another uid gets exactly one response: {peer}")
            msg = json.loads(lines[0])
            self.assertIsNone(msg.get("id", "absent"), f"the refusal has id null: {msg}")
            self.assertEqual(msg.get("error", {}).get("code"), -32001, f"a peer with another uid: error -32001: {msg}")
            self.assertEqual(peer["end"], "eof", f"then the server disconnects: {peer}")
            self.assertIsInstance(c2.call("version"), dict, "the server keeps serving after refusing a peer")
        finally:
            for c in self._clients:
                c.close(timeout=5)
            srv.stop(timeout=5)

    def test_out_of_file_descriptors(self):
        # With 128 open files at most, idle connections must be refused, not
        # abort the server (once, eventfd() failed in a detached thread).
        sockdir = os.path.join(SCRATCH, "sock-fds")
        path = os.path.join(sockdir, "sock")
        srv = SocketServer(SW, path, STATE)
        srv.cmd = ["prlimit", "--nofile=128:128", "--"] + srv.cmd
        srv.start()
        extra = []
        try:
            first = self.own(srv.connect())
            refused = 0
            deadline = time.monotonic() + 60
            while len(extra) < 200:
                self.assertIsNone(srv.proc.poll(), f"the server died after {len(extra)} more connections: {srv.stderr_tail()}")
                self.assertLess(time.monotonic(), deadline, f"the server stopped accepting after {len(extra)} connections")
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    s.connect(path)  # EAGAIN while the backlog is full
                except BlockingIOError:
                    s.close()
                    time.sleep(0.02)
                    continue
                except OSError as e:
                    s.close()
                    self.fail(f"connection {len(extra) + 2} failed: {e}; server: {srv.stderr_tail()}")
                extra.append(s)
            time.sleep(1)
            for s in extra:
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                if data:
                    msg = json.loads(data.split(b"\n")[0])
                    self.assertEqual(msg.get("error", {}).get("code"), -32003, f"a refused connection: {msg}")
                    self.assertIsNone(msg.get("id", "absent"), f"the refusal has id null: {msg}")
                    refused += 1
            self.assertIsNone(srv.proc.poll(), f"the server is still running after 200 more connections: {srv.stderr_tail()}")
            self.assertGreater(refused, 0, "connections beyond the limit are refused with error -32003")
            self.assertIsInstance(first.call("version", timeout=10), dict, "an existing connection still works")
            out, _, _ = self.run_ok(["echo", "still"], "sandbox.run on an existing connection", client=first)
            self.assertEqual(out, b"still\n", "a command (pipes: new descriptors) still runs")

            def cpu():
                with open(f"/proc/{srv.proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            before = cpu()
            time.sleep(2)
            spent = cpu() - before
            self.assertLess(spent, 0.5, f"the server does not spin on EMFILE: {spent:.2f} s of CPU in 2 s")
            for s in extra:
                s.close()
            extra = []
            later = self.own(srv.connect())
            self.assertIsInstance(later.call("version", timeout=10), dict, "once connections close, a new one is served")
        finally:
            for s in extra:
                s.close()
            for c in self._clients:
                c.close(timeout=5)
            srv.stop(timeout=5)

    def refused_dir(self, d, label):
        path = os.path.join(d, "sock")
        err = os.path.join(SCRATCH, "refused.stderr")
        with open(err, "wb") as f:
            p = subprocess.Popen([SW, "--state-dir", STATE, "serve", "--socket", path],
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=f)
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        with open(err, errors="replace") as f:
            text = f.read()
        self.assertIsNotNone(rc, f"serve --socket in {label}: refuses to start (it was still running after 10 s)")
        self.assertNotEqual(rc, 0, f"serve --socket in {label}: exits non-zero ({text.strip()})")
        self.assertFalse(os.path.exists(path), f"serve --socket in {label}: no socket created")

    def test_socket_directory_must_be_private(self):
        d = tempfile.mkdtemp(prefix="sock-open.", dir=SCRATCH)
        os.chmod(d, 0o777)
        self.refused_dir(d, "a directory writable by others (0777)")
        d = tempfile.mkdtemp(prefix="sock-other.", dir=SCRATCH)
        os.chmod(d, 0o700)
        os.chown(d, 1001, 1001)
        self.refused_dir(d, "a directory owned by uid 1001")


class O_NoRuntime(ServeCase):
    def test_runtime_missing(self):
        state2 = tempfile.mkdtemp(prefix="noruntime-state.", dir=SCRATCH)
        try:
            env = dict(os.environ, SANDWEAVE_RUNSC="/nonexistent/runsc")
            c = self.own(spawn(state_dir=state2, env=env))
            v = c.call("version")
            self.assertNotIn("runtime", v, f"version: runtime is omitted when no runtime is found: {v}")
            d = c.call("doctor", timeout=120)
            self.assertIs(d.get("ok"), False, "doctor without a runtime: ok is false (a required check failed)")
            self.expectError("sandbox.create", {}, 5, "sandbox.create without a runtime: error 5", client=c, timeout=120)
        finally:
            for cl in self._clients:
                cl.close(timeout=10)
            shutil.rmtree(state2, ignore_errors=True)


# --- fixture -----------------------------------------------------------------------------------

def setUpModule():
    S.client = Client.spawn(SW, state_dir=STATE, capabilities=["run.stdin", "run.signal", "run.cancel"])
    sb = create(template="base")
    S.sandbox = sb["id"]


def tearDownModule():
    c = S.client
    if c is None:
        return
    for name in list(S.pools):
        try:
            c.call("pool.rm", {"name": name}, timeout=120)
        except (RpcError, RpcTimeout, ConnectionClosed):
            pass
    for sid in list(S.snapshots):
        try:
            c.call("snapshot.rm", {"id": sid}, timeout=60)
        except (RpcError, RpcTimeout, ConnectionClosed):
            pass
    for sid in dict.fromkeys(S.created):
        rm_quietly(c, sid)
    c.close()


def main():
    t0 = time.monotonic()
    prog = unittest.main(module=__name__, exit=False, verbosity=2)
    ok = prog.result.wasSuccessful()
    sys.stderr.write(f"serve_test: {time.monotonic() - t0:.1f} s\n")
    if not ok:
        for name in sorted(os.listdir(SCRATCH)):
            if name.endswith(".stderr"):
                with open(os.path.join(SCRATCH, name), errors="replace") as f:
                    text = f.read()
                if text.strip():
                    sys.stderr.write(f"--- server log {name} (last 3000 bytes)\n{text[-3000:]}\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
