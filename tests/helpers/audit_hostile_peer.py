#!/usr/bin/env python3
"""Hostile peers on an audit writer's sink socket (audit_writer_raw.sh).

audit_hostile_peer.py SINK_SOCKET MODE, MODE one of
  bad-handshakes  connections that never complete the handshake
  junk-stream     a handshake, then short, malformed, unknown and oversized messages
  intruder        a second connection; prints "rejected" or "accepted"
"""
import socket, struct, sys
path, mode = sys.argv[1], sys.argv[2]
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    return s
def hdr(t, dropped=0, hs=8):
    return struct.pack("<HHI", hs, t, dropped) + b"\0" * (hs - 8)
if mode == "bad-handshakes":
    for hs in [b"garbage", b"\x08\x00", b"", b"x" * 5000]:
        s = conn()
        try:
            s.send(hs) if hs else s.shutdown(socket.SHUT_WR)
            s.settimeout(3)
            s.recv(16)
        except OSError:
            pass
        s.close()
elif mode == "junk-stream":
    s = conn()
    s.send(b"\x08\x01")
    assert s.recv(16) == b"\x08\x01"
    s.send(b"\x01")                                  # short
    s.send(struct.pack("<HHI", 200, 7, 0))            # header_size > length
    s.send(hdr(77) + b"\x01\x02\x03")                  # unknown type
    s.send(hdr(7) + b"\xff" * 11)                      # garbage protobuf
    s.send(hdr(3, 0, 24) + b"\x12\x03abc")             # longer header: skipped, fine
    s.setsockopt(socket.SOL_SOCKET, 32, 32 << 20)      # SO_SNDBUFFORCE
    for size in (10 << 20, 3 << 20):                   # the kernel may refuse 10 MiB
        try:
            s.send(hdr(3) + b"A" * size)
            break
        except OSError:
            pass
    s.close()
elif mode == "intruder":
    s = conn()
    s.settimeout(3)
    try:
        s.send(b"\x08\x01")
        r = s.recv(16)
    except OSError:
        r = b""
    print("rejected" if not r else "accepted")
