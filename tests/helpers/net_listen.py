#!/usr/bin/env python3
"""A test server for tests/integration/network*.sh: listens on ADDRESS (IPv4
or IPv6) at each
PORT/PROTO given (TCP and UDP), and appends one line "PROTO PORT PEER" to LOG
for every connection accepted or datagram received; a TCP peer gets "hello
PORT\\n". Writes READY_FILE once every socket is bound. Runs until killed.

Usage: net_listen.py ADDRESS LOG READY_FILE PORT/PROTO...
"""
import os
import selectors
import socket
import sys


def main():
    address, log_path, ready = sys.argv[1], sys.argv[2], sys.argv[3]
    sel = selectors.DefaultSelector()
    for spec in sys.argv[4:]:
        port, proto = spec.split("/")
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        s = socket.socket(family, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, int(port)))
        if proto == "tcp":
            s.listen(64)
        sel.register(s, selectors.EVENT_READ, (proto, int(port)))
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    with open(log_path, "a", buffering=1) as log:
        while True:
            for key, _ in sel.select():
                proto, port = key.data
                if proto == "tcp":
                    conn, peer = key.fileobj.accept()
                    try:
                        conn.sendall(b"hello %d\n" % port)
                    except OSError:
                        pass
                    conn.close()
                else:
                    data, peer = key.fileobj.recvfrom(2048)
                log.write("%s %d %s\n" % (proto, port, peer[0]))


if __name__ == "__main__":
    main()
