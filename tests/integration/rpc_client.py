"""A small JSON-RPC 2.0 client for `sandweave serve` (docs/protocol.md).

Standard library only (Python 3.9+). Used by tests/integration/serve_test.py and
bench/serve.sh; it is a test client, so besides routing messages it records
everything the server sends that breaks docs/protocol.md in `violations`
(`check()` raises when there are any).

    c = Client.spawn("/path/to/sandweave", state_dir="/tmp/state")   # serve --stdio, then hello
    c.call("version")                                                 # -> result, or raises RpcError
    code, out, err, result = c.run(sandbox_id, ["sh", "-c", "echo hi"])
    req = c.start_run(sandbox_id, ["sleep", "60"])                    # in flight
    c.call("run.cancel", {"request": req.id}); req.wait()
    c.send_raw(b"not json\\n")                                         # bad-input tests
    c.close()

    c = Client.connect("/run/sw/sock")                                # serve --socket
"""

import base64
import json
import os
import socket
import subprocess
import tempfile
import threading
import time

PROTOCOL = 1
MAX_LINE = 1 << 20  # bytes in one line, newline excluded
MAX_CHUNK = 64 << 10  # decoded bytes in one base64 data field
LOG_LEVELS = ("debug", "info", "warn", "error")

_UNSET = object()


class RpcError(Exception):
    """An error response. code, message, data and the whole response are kept."""

    def __init__(self, method, id, response):
        err = response.get("error") if isinstance(response.get("error"), dict) else {}
        self.method = method
        self.id = id
        self.code = err.get("code")
        self.message = err.get("message")
        self.data = err.get("data")
        self.response = response
        text = f"{method} (id {id!r}) failed: error {self.code}: {self.message}"
        if self.data is not None:
            text += f" data={json.dumps(self.data)}"
        super().__init__(text)


class RpcTimeout(AssertionError):
    """No response (or not the awaited notification) in time."""


class ConnectionClosed(Exception):
    """The server closed the connection before answering."""


def b64(data):
    return base64.b64encode(data).decode("ascii")


def unb64(text):
    """Strict, canonical RFC 4648 base64 (with padding); ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"base64 data is a {type(text).__name__}, not a string")
    data = base64.b64decode(text.encode("ascii"), validate=True)
    if base64.b64encode(data).decode("ascii") != text:
        raise ValueError(f"not canonical base64: {text[:40]!r}")
    return data


def id_key(id):
    """Ids 1 and "1" are different requests; so are 1 and True."""
    return json.dumps(id, sort_keys=True)


class Request:
    """One request sent: the responses carrying its id and the notifications
    naming it. Everything is filled in by the client's reader thread."""

    def __init__(self, client, id, method, params):
        self._client = client
        self.id = id
        self.method = method
        self.params = params
        self.sent_at = time.monotonic()
        self.done_at = None  # when the first response arrived
        self.responses = []  # more than one only when the id was reused while in flight
        self.events = []  # ("output", stream, bytes) / ("exit", params) / ("log", params) / ("response", msg)
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.chunks = []  # (stream, decoded length) per run.output
        self.exits = []  # params of each run.exit
        self.logs = []  # params of each log notification
        self.finished = False  # a response that ends the request arrived (not a -32600 for a reused id)

    def __repr__(self):
        return f"<{self.method} id={self.id!r} responses={len(self.responses)}>"

    @property
    def done(self):
        return bool(self.responses)

    def wait(self, timeout=60, count=1):
        """The count-th response (a dict with result or error)."""
        c = self._client
        with c._cond:
            ok = c._cond.wait_for(lambda: len(self.responses) >= count or c.eof, timeout)
            if len(self.responses) >= count:
                return self.responses[count - 1]
            if not ok:
                raise RpcTimeout(f"no response to {self.method} (id {self.id!r}) within {timeout} s"
                                 f"{c.stderr_note()}")
            raise ConnectionClosed(f"connection closed before the response to {self.method} "
                                   f"(id {self.id!r}){c.stderr_note()}")

    def result(self, timeout=60):
        """The result, or RpcError for an error response."""
        msg = self.wait(timeout)
        if "error" in msg:
            raise RpcError(self.method, self.id, msg)
        return msg.get("result")

    def wait_output(self, predicate, timeout=30, what="the awaited output"):
        """Waits until predicate(self) is true (for example b"ready" in r.stdout)."""
        c = self._client
        with c._cond:
            if not c._cond.wait_for(lambda: predicate(self) or self.done or c.eof, timeout) or not predicate(self):
                raise RpcTimeout(f"{self.method} (id {self.id!r}): {what} did not arrive within {timeout} s; "
                                 f"stdout so far {bytes(self.stdout[-200:])!r}, stderr {bytes(self.stderr[-200:])!r}, "
                                 f"responses {self.responses!r}")


class Client:
    """One connection. Use Client.spawn (serve --stdio) or Client.connect (serve --socket)."""

    def __init__(self, rfile, wfile, name, proc=None, sock=None, stderr_path=None):
        self._r = rfile
        self._w = wfile
        self.name = name
        self.proc = proc
        self.sock = sock
        self.stderr_path = stderr_path
        self._cond = threading.Condition()
        self._wlock = threading.Lock()
        self._next_id = 1
        self._requests = {}  # id_key -> the latest Request sent with that id
        self.null_responses = []  # responses with "id": null (decode errors, peer refused)
        self.unmatched = []  # responses whose id no request of ours carried
        self.orphans = []  # notifications naming no request of ours
        self.violations = []  # what the server sent against docs/protocol.md
        self.lines = 0
        self.eof = False
        self.capabilities = []  # what we told the server in hello
        self.hello_result = None
        self._reader = threading.Thread(target=self._read_loop, name=f"rpc-reader-{name}", daemon=True)
        self._reader.start()

    # --- construction -------------------------------------------------------------------

    @classmethod
    def spawn(cls, sandweave=None, state_dir=None, args=(), handshake=True, stderr_path=None,
              env=None, capabilities=(), protocol=PROTOCOL, client_name="sandweave-tests"):
        """Starts `SANDWEAVE [--state-dir DIR] serve --stdio ARGS` and, unless
        handshake is false, says hello."""
        sandweave = sandweave or os.environ["SANDWEAVE"]
        cmd = [sandweave]
        if state_dir:
            cmd += ["--state-dir", state_dir]
        cmd += ["serve", "--stdio", *args]
        if stderr_path is None:
            fd, stderr_path = tempfile.mkstemp(prefix="sw-serve-", suffix=".stderr",
                                               dir=os.environ.get("SERVE_TEST_SCRATCH"))
            os.close(fd)
        err = open(stderr_path, "ab")
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    env=env, close_fds=True)
        finally:
            err.close()
        c = cls(proc.stdout, proc.stdin, f"stdio:{proc.pid}", proc=proc, stderr_path=stderr_path)
        if handshake:
            c.hello(protocol=protocol, client=client_name, capabilities=capabilities)
        return c

    @classmethod
    def connect(cls, path, handshake=True, capabilities=(), protocol=PROTOCOL,
                client_name="sandweave-tests", stderr_path=None):
        """Connects to `serve --socket PATH`. stderr_path: the server's log, for messages."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        c = cls(s.makefile("rb"), s.makefile("wb"), f"socket:{path}", sock=s, stderr_path=stderr_path)
        if handshake:
            c.hello(protocol=protocol, client=client_name, capabilities=capabilities)
        return c

    # --- sending ----------------------------------------------------------------------------

    def fresh_id(self):
        with self._cond:
            while True:
                i = self._next_id
                self._next_id += 1
                if id_key(i) not in self._requests:
                    return i

    def _register(self, id, method, params, reuse=False):
        with self._cond:
            key = id_key(id)
            old = self._requests.get(key)
            if reuse and old is not None and not old.done:
                return old
            req = Request(self, id, method, params)
            self._requests[key] = req
            return req

    def _write(self, data):
        with self._wlock:
            self._w.write(data)
            self._w.flush()

    def send(self, method, params=None, id=None):
        """Sends a request (params None: omitted) and returns its Request at once."""
        if id is None:
            id = self.fresh_id()
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        req = self._register(id, method, params)
        self._write((json.dumps(msg, separators=(",", ":")) + "\n").encode("utf-8"))
        return req

    def send_raw(self, data, expect_id=_UNSET, method="(raw)"):
        """Writes data exactly as given (bytes, or str encoded as UTF-8; add the
        newline yourself). With expect_id, responses carrying that id are routed
        to the returned Request; when a request with that id is still waiting,
        it is that same Request (so a reused id's two responses land together)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        req = None
        if expect_id is not _UNSET:
            req = self._register(expect_id, method, None, reuse=True)
        self._write(data)
        return req

    def call(self, method, params=None, timeout=60):
        """Sends a request and returns its result; RpcError on an error response."""
        return self.send(method, params).result(timeout)

    def error_of(self, method, params=None, timeout=60):
        """Sends a request that must fail and returns the RpcError (AssertionError on success)."""
        req = self.send(method, params)
        msg = req.wait(timeout)
        if "error" not in msg:
            raise AssertionError(f"{method} {json.dumps(params)[:300]} should have failed, "
                                 f"got result {json.dumps(msg.get('result'))[:500]}")
        return RpcError(method, req.id, msg)

    def hello(self, protocol=PROTOCOL, client="sandweave-tests", capabilities=(), timeout=30):
        params = {"protocol": protocol}
        if client is not None:
            params["client"] = client
        if capabilities is not None:
            params["capabilities"] = list(capabilities)
        self.capabilities = list(capabilities or ())
        self.hello_result = self.call("hello", params, timeout)
        return self.hello_result

    # --- commands ----------------------------------------------------------------------------

    def start_run(self, sandbox, argv, stdin=False, **params):
        """Sends sandbox.run (stdin: whether to ask for "stdin": true); extra
        params (user, cwd, env, timeout_ms) go as given."""
        p = {"id": sandbox, "argv": list(argv)}
        if stdin:
            p["stdin"] = True
        p.update(params)
        return self.send("sandbox.run", p)

    def send_stdin(self, request, data=None, eof=False, timeout=60):
        """One run.stdin request; returns its result (RpcError on error)."""
        p = {"request": request.id if isinstance(request, Request) else request}
        if data is not None:
            p["data"] = b64(data)
        if eof:
            p["eof"] = True
        return self.call("run.stdin", p, timeout)

    def run(self, sandbox, argv, stdin=None, timeout=120, chunk=MAX_CHUNK, **params):
        """Runs a command to its end: (exit_code, stdout bytes, stderr bytes, result).
        stdin bytes are sent in chunks of `chunk`, each awaited, then eof.
        RpcError when the response is an error."""
        req = self.start_run(sandbox, argv, stdin=stdin is not None, **params)
        if stdin is not None:
            for i in range(0, len(stdin), chunk):
                self.send_stdin(req, stdin[i:i + chunk])
            self.send_stdin(req, eof=True)
        result = req.result(timeout)
        return result.get("exit_code"), bytes(req.stdout), bytes(req.stderr), result

    def wait_until(self, predicate, timeout=30):
        """Waits (under the client's lock) until predicate() is true; returns whether it became true."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    # --- reading ----------------------------------------------------------------------------

    def _violate(self, text):
        self.violations.append(text)

    def _read_loop(self):
        try:
            while True:
                line = self._r.readline()
                if not line:
                    break
                with self._cond:
                    try:
                        self._handle(line)
                    except Exception as e:  # a bug here must not kill the reader silently
                        self._violate(f"client could not handle a line ({e!r}): {line[:300]!r}")
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self.eof = True
                self._cond.notify_all()

    def _handle(self, line):
        self.lines += 1
        if not line.endswith(b"\n"):
            self._violate(f"last line not terminated by \\n: {line[:200]!r}")
        body = line[:-1] if line.endswith(b"\n") else line
        if len(body) > MAX_LINE:
            self._violate(f"a line of {len(body)} bytes (over 1 MiB): {body[:200]!r}")
        try:
            msg = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            self._violate(f"server wrote a line that is not JSON ({e}): {body[:300]!r}")
            return
        if not isinstance(msg, dict):
            self._violate(f"server wrote a JSON {type(msg).__name__}, not an object: {body[:300]!r}")
            return
        if msg.get("jsonrpc") != "2.0":
            self._violate(f"message without \"jsonrpc\": \"2.0\": {body[:300]!r}")
        if "id" in msg:
            self._response(msg, body)
        elif "method" in msg:
            self._notification(msg, body)
        else:
            self._violate(f"neither a response (id) nor a notification (method): {body[:300]!r}")

    def _response(self, msg, body):
        has_result, has_error = "result" in msg, "error" in msg
        if has_result == has_error:
            self._violate(f"a response must carry exactly one of result and error: {body[:300]!r}")
        if has_error:
            err = msg["error"]
            if not (isinstance(err, dict) and isinstance(err.get("code"), int) and not isinstance(err.get("code"), bool)
                    and isinstance(err.get("message"), str)):
                self._violate(f"error object without an integer code and a string message: {body[:300]!r}")
            elif err["code"] > 0:
                data = err.get("data")
                if not (isinstance(data, dict) and data.get("exit_status") == err["code"]):
                    self._violate(f"operation error {err['code']} without data.exit_status repeating it: {body[:300]!r}")
        rid = msg["id"]
        if rid is None:
            self.null_responses.append(msg)
            return
        req = self._requests.get(id_key(rid))
        if req is None:
            self.unmatched.append(msg)
            self._violate(f"response with an id we never sent: {body[:300]!r}")
            return
        if not req.responses:
            req.done_at = time.monotonic()
        req.responses.append(msg)
        req.events.append(("response", msg))
        # -32600 answers a bad line (such as a reused id), not the request in flight.
        if not ("error" in msg and isinstance(msg["error"], dict) and msg["error"].get("code") == -32600):
            req.finished = True

    def _notification(self, msg, body):
        method = msg["method"]
        params = msg.get("params")
        if not isinstance(params, dict) or "request" not in params:
            self._violate(f"notification without params.request: {body[:300]!r}")
            return
        req = self._requests.get(id_key(params["request"]))
        if req is None:
            self.orphans.append(msg)
            self._violate(f"notification naming a request we never sent: {body[:300]!r}")
            return
        if method == "run.output":
            stream = params.get("stream")
            if stream not in ("stdout", "stderr"):
                self._violate(f"run.output with stream {stream!r}: {body[:300]!r}")
                return
            try:
                data = unb64(params.get("data"))
            except (ValueError, TypeError) as e:
                self._violate(f"run.output data is not canonical base64 ({e}): {body[:300]!r}")
                return
            if len(data) > MAX_CHUNK:
                self._violate(f"run.output chunk of {len(data)} decoded bytes (over 64 KiB) for request {req.id!r}")
            if req.exits:
                self._violate(f"run.output after run.exit for request {req.id!r}")
            if req.finished:
                self._violate(f"run.output after the response to request {req.id!r}")
            (req.stdout if stream == "stdout" else req.stderr).extend(data)
            req.chunks.append((stream, len(data)))
            req.events.append(("output", stream, data))
        elif method == "run.exit":
            code, timed_out = params.get("exit_code"), params.get("timed_out")
            if not isinstance(code, int) or isinstance(code, bool) or not isinstance(timed_out, bool):
                self._violate(f"run.exit without an integer exit_code and a boolean timed_out: {body[:300]!r}")
            if req.finished:
                self._violate(f"run.exit after the response to request {req.id!r}")
            req.exits.append(params)
            req.events.append(("exit", params))
        elif method == "log":
            if "log" not in self.capabilities:
                self._violate(f"log notification to a client that did not list \"log\": {body[:300]!r}")
            if params.get("level") not in LOG_LEVELS or not isinstance(params.get("message"), str):
                self._violate(f"log notification without a known level and a string message: {body[:300]!r}")
            req.logs.append(params)
            req.events.append(("log", params))
        else:
            self._violate(f"unknown notification {method!r}: {body[:300]!r}")

    # --- state and shutdown ---------------------------------------------------------------------

    def take_null_responses(self):
        with self._cond:
            out, self.null_responses = self.null_responses, []
            return out

    def check(self):
        """AssertionError listing every protocol violation seen so far (then forgets them)."""
        with self._cond:
            v, self.violations = self.violations, []
        if v:
            raise AssertionError(f"{self.name}: the server broke docs/protocol.md:\n  " + "\n  ".join(v))

    def stderr_tail(self, n=2000):
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_note(self):
        tail = self.stderr_tail(800).strip()
        return f"\n  server stderr (tail): {tail}" if tail else ""

    def close_stdin(self):
        """Half-close: the server reads end of file (stdio: its stdin; socket: SHUT_WR)."""
        with self._wlock:
            if self.sock is not None:
                try:
                    self.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            else:
                try:
                    self._w.close()
                except OSError:
                    pass

    def close(self, timeout=15):
        """Ends the connection. For a spawned server: closes its stdin, waits for
        it to exit (killing it after timeout) and returns its exit status."""
        self.close_stdin()
        rc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._reader.join(timeout)
        for f in (self._r, self._w):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        if self.sock is not None:
            self.sock.close()
        return rc


class SocketServer:
    """`SANDWEAVE [--state-dir DIR] serve --socket PATH` in the background."""

    def __init__(self, sandweave, path, state_dir=None, args=(), stderr_path=None):
        self.path = path
        cmd = [sandweave]
        if state_dir:
            cmd += ["--state-dir", state_dir]
        self.cmd = cmd + ["serve", "--socket", path, *args]
        if stderr_path is None:
            fd, stderr_path = tempfile.mkstemp(prefix="sw-serve-socket-", suffix=".stderr",
                                               dir=os.environ.get("SERVE_TEST_SCRATCH"))
            os.close(fd)
        self.stderr_path = stderr_path
        self.proc = None

    def start(self, timeout=10):
        """Starts the server and waits for the socket to appear."""
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         close_fds=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{' '.join(self.cmd)} exited with {self.proc.returncode} "
                                     f"before listening; stderr: {self.stderr_tail()}")
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.path)
                s.close()
                return self
            except OSError:
                s.close()
            time.sleep(0.02)
        raise AssertionError(f"{' '.join(self.cmd)}: no socket at {self.path} after {timeout} s; "
                             f"stderr: {self.stderr_tail()}")

    def connect(self, **kw):
        return Client.connect(self.path, stderr_path=self.stderr_path, **kw)

    def stderr_tail(self, n=2000):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after timeout; returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
