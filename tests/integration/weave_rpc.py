"""Raw JSON-RPC calls to a `sandweave controller` over TLS (docs/protocol.md).

For tests that need what the CLI does not do on its own: a reservation held
open across commands, a hello with a chosen credential (a munge credential
sent twice). Standard library only; the certificate is checked against the
pinned fingerprint as the CLI does.

    python3 weave_rpc.py HOST:PORT FINGERPRINT (--token-file F | --munge CRED) \
        METHOD [PARAMS_JSON]...

Sends hello, then each METHOD with its PARAMS_JSON (one call per pair, in
order) and prints each answer line (the hello's first) as JSON. Exits 0 when
every call got a result, 1 when one got an error (it stops there), 2 on usage.
"""

import hashlib
import json
import socket
import ssl
import sys


def main(argv):
    if len(argv) < 5 or argv[2] not in ("--token-file", "--munge"):
        print(__doc__, file=sys.stderr)
        return 2
    host, port = argv[0].rsplit(":", 1)
    fingerprint = argv[1].lower().replace("sha256:", "").replace(":", "")
    hello = {"protocol": 1, "client": "weave_rpc.py"}
    if argv[2] == "--token-file":
        with open(argv[3]) as f:
            hello["token"] = f.read().strip()
    else:
        hello["munge"] = argv[3]
    rest = argv[4:]
    calls = [(rest[i], json.loads(rest[i + 1]) if i + 1 < len(rest) else {}) for i in range(0, len(rest), 2)]

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # pinned below, as the CLI does
    with socket.create_connection((host, int(port)), timeout=120) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            der = s.getpeercert(binary_form=True)
            if hashlib.sha256(der).hexdigest() != fingerprint:
                print("the controller's certificate is not the pinned one", file=sys.stderr)
                return 2
            f = s.makefile("rwb")
            requests = [("hello", hello)] + calls
            for n, (method, params) in enumerate(requests):
                f.write((json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n").encode())
                f.flush()
                line = f.readline()
                if not line:
                    print(json.dumps({"error": {"message": "connection closed"}}))
                    return 1
                answer = json.loads(line)
                print(json.dumps(answer))
                if "error" in answer:
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
