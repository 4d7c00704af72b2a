#!/usr/bin/env python3
"""Decodes a PNG (8-bit RGB or RGBA, as maim writes them) with the standard
library and prints what the desktop test checks, one `key value` per line:

    size WIDTHxHEIGHT
    lit FRACTION     pixels that are not black (any channel > 40): windows, text
    light FRACTION   pixels with every channel >= 200
    colors N         distinct colours (capped at 10000)

With `--region X Y W H` only that rectangle is counted. Exit 1 with one line
on stderr for anything that is not such a PNG.
"""

import struct
import sys
import zlib


def fail(msg):
    print(f"png_pixels: {msg}", file=sys.stderr)
    sys.exit(1)


def decode(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("no PNG signature")
    at, idat, ihdr = 8, b"", None
    while at + 12 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[at + 8 + length : at + 12 + length])[0]:
            fail(f"bad CRC in {kind!r}")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        at += 12 + length
    if ihdr is None:
        fail("no IHDR")
    width, height, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        fail(f"unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
            elif f != 0:
                fail(f"bad filter {f} in row {y}")
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: png_pixels.py FILE [--region X Y W H]")
    with open(args[0], "rb") as f:
        width, height, bpp, rows = decode(f.read())
    x0, y0, w, h = 0, 0, width, height
    if len(args) == 6 and args[1] == "--region":
        x0, y0, w, h = (int(v) for v in args[2:6])
    lit, light, colors, n = 0, 0, set(), 0
    for y in range(y0, min(height, y0 + h)):
        row = rows[y]
        for x in range(x0, min(width, x0 + w)):
            r, g, b = row[x * bpp], row[x * bpp + 1], row[x * bpp + 2]
            n += 1
            if r > 40 or g > 40 or b > 40:
                lit += 1
            if r >= 200 and g >= 200 and b >= 200:
                light += 1
            if len(colors) < 10000:
                colors.add((r, g, b))
    print(f"size {width}x{height}")
    print(f"lit {lit / max(n, 1):.4f}")
    print(f"light {light / max(n, 1):.4f}")
    print(f"colors {len(colors)}")


if __name__ == "__main__":
    main()
