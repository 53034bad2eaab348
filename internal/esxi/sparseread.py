# Reads a byte range of a file on the ESXi host and writes it to stdout as a
# framed stream in which runs of zeros cost a few bytes instead of their
# length. Standard library only; runs on the host's Python 3.5 and later.
#
# Usage: python -c SCRIPT PATH OFFSET LENGTH
#        python -c SCRIPT --serve
#        python -c SCRIPT --probe
#
# --serve is the long-lived mode: it reads requests from stdin, each
#   b"R" pathlen:u16 path[pathlen] offset:u64 length:u64
# and answers each with the stream below, until stdin ends. One process
# then serves every range of a stream, instead of one interpreter start
# per range.
#
# Stream (all integers big-endian):
#   magic   b"VMMSPR2\n"
#   DATA    b"D" offset:u64 length:u32 bytes[length]   (length <= 1 MiB)
#   ZERO    b"Z" offset:u64 length:u64
#   END     b"E" total:u64 digest[32]
# Frames cover [OFFSET, OFFSET+LENGTH) in order, without gaps or overlap.
# END carries the disk digest of the whole range, zeros included (the
# provider's package diskdigest): the SHA-256 of the SHA-256s of the
# range's 1 MiB leaves, from OFFSET, the last one shorter. An all-zero leaf's
# hash is the same constant every time, so holes and zero runs cost no
# hashing, here or in the provider.
#
# Reads are 1 MiB (VMFS's file block, and dd's block size elsewhere in the
# provider); each read is classified in 64 KiB grains, the size of the
# client's own zero-block detection, so a partly written MiB still sends
# only its written grains. Holes reported by SEEK_DATA/SEEK_HOLE are not
# read at all.
import errno
import hashlib
import os
import struct
import sys

MAGIC = b"VMMSPR2\n"
READ = 1 << 20
GRAIN = 64 << 10
LEAF = 1 << 20
ZEROS = bytes(LEAF)
ZERO_LEAF = {}


def zero_leaf(n):
    # The SHA-256 of n zero bytes, n <= LEAF: hashed once per length.
    d = ZERO_LEAF.get(n)
    if d is None:
        d = hashlib.sha256(memoryview(ZEROS)[:n]).digest()
        ZERO_LEAF[n] = d
    return d


class Digest(object):
    # The disk digest of the bytes added in order: data with update, zeros
    # with skip (never hashed unless a leaf also holds data).
    def __init__(self):
        self.outer = hashlib.sha256()
        self.leaf = None
        self.pos = 0
        self.zeros = 0

    def update(self, mv):
        i, n = 0, len(mv)
        while i < n:
            k = min(n - i, LEAF - self.pos)
            if self.leaf is None:
                self.leaf = hashlib.sha256()
            if self.zeros:
                self.leaf.update(memoryview(ZEROS)[:self.zeros])
                self.zeros = 0
            self.leaf.update(mv[i:i + k])
            i += k
            self.pos += k
            if self.pos == LEAF:
                self.end()

    def skip(self, n):
        while n > 0:
            k = min(n, LEAF - self.pos)
            self.zeros += k
            self.pos += k
            n -= k
            if self.pos == LEAF:
                self.end()

    def end(self):
        if self.leaf is None:
            self.outer.update(zero_leaf(self.pos))
        else:
            if self.zeros:
                self.leaf.update(memoryview(ZEROS)[:self.zeros])
            self.outer.update(self.leaf.digest())
        self.leaf, self.pos, self.zeros = None, 0, 0

    def digest(self):
        if self.pos:
            self.end()
        return self.outer.digest()


def fail(msg):
    sys.stderr.write("vmm-sparse: %s\n" % msg)
    sys.stderr.flush()
    sys.exit(1)


class Stream(object):
    def __init__(self, out, off):
        self.out = out
        self.h = Digest()
        self.zoff = off
        self.zlen = 0
        self.zb = bytes(READ)
        self.zg = bytes(GRAIN)

    def run(self, off, n):
        # Adds [off, off+n) to the pending zero run frame.
        if self.zlen == 0:
            self.zoff = off
        self.zlen += n

    def hole(self, off, n):
        self.run(off, n)
        self.h.skip(n)

    def digest(self):
        return self.h.digest()

    def flush(self):
        if self.zlen:
            self.out.write(b"Z" + struct.pack(">QQ", self.zoff, self.zlen))
            self.zlen = 0

    def data(self, off, mv):
        self.flush()
        self.out.write(b"D" + struct.pack(">QI", off, len(mv)))
        self.out.write(mv)

    def block(self, off, buf):
        # buf: bytes read at off, at most READ long. Comparisons are on
        # bytes objects (memcmp); memoryview comparisons go byte by byte.
        n = len(buf)
        if buf == (self.zb if n == READ else bytes(n)):
            self.hole(off, n)
            return
        self.h.update(buf)
        mv = memoryview(buf)
        start = None
        i = 0
        while i < n:
            j = min(i + GRAIN, n)
            if buf[i] == 0 and buf[i:j] == (self.zg if j - i == GRAIN else bytes(j - i)):
                if start is not None:
                    self.data(off + start, mv[start:i])
                    start = None
                self.run(off + i, j - i)
            elif start is None:
                start = i
            i = j
        if start is not None:
            self.data(off + start, mv[start:n])


def probe_data(fd, pos, end, state):
    # Returns (data_start, data_end) of the next data region at or after
    # pos, clipped to end; data_start == end when only holes remain.
    if not state[0]:
        return pos, end
    try:
        d = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return end, end
        state[0] = False
        return pos, end
    if d >= end:
        return end, end
    try:
        h = os.lseek(fd, d, os.SEEK_HOLE)
    except OSError:
        state[0] = False
        return d, end
    return d, min(max(h, d), end)


def serve_range(out, path, off, length):
    if off < 0 or length <= 0 or off + length > (1 << 63) - 1:
        fail("invalid range offset=%d length=%d" % (off, length))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        fail("can't open '%s': %s" % (path, e.strerror))
    try:
        end = off + length
        size = os.fstat(fd).st_size
        if size < end:
            fail("'%s' is %d bytes, shorter than the range end %d" % (path, size, end))
        out.write(MAGIC)
        s = Stream(out, off)
        state = [hasattr(os, "SEEK_DATA") and hasattr(os, "SEEK_HOLE")]
        pos = off
        while pos < end:
            d, dend = probe_data(fd, pos, end, state)
            if d > pos:
                s.hole(pos, d - pos)
                pos = d
            while pos < dend:
                try:
                    buf = os.pread(fd, min(READ, dend - pos), pos)
                except OSError as e:
                    fail("read error at offset %d of '%s': %s" % (pos, path, e.strerror))
                if not buf:
                    fail("'%s' ended at offset %d, before the range end %d" % (path, pos, end))
                s.block(pos, buf)
                pos += len(buf)
        s.flush()
        out.write(b"E" + struct.pack(">Q", length) + s.digest())
        out.flush()
    finally:
        os.close(fd)


def read_exact(inp, n):
    b = b""
    while len(b) < n:
        k = inp.read(n - len(b))
        if not k:
            return b
        b += k
    return b


def serve(inp, out):
    # Long-lived mode: one range per request, until stdin ends.
    while True:
        h = read_exact(inp, 3)
        if not h:
            return
        if len(h) != 3 or h[:1] != b"R":
            fail("bad request header")
        (n,) = struct.unpack(">H", h[1:3])
        req = read_exact(inp, n + 16)
        if len(req) != n + 16:
            fail("truncated request")
        path = os.fsdecode(req[:n])
        off, length = struct.unpack(">QQ", req[n:])
        serve_range(out, path, off, length)


def main(argv):
    if argv == ["--probe"]:
        sys.stdout.write("vmm-sparse 1 python %d.%d\n" % tuple(sys.version_info[:2]))
        return
    if argv == ["--serve"]:
        serve(sys.stdin.buffer, sys.stdout.buffer)
        return
    if len(argv) != 3:
        fail("usage: PATH OFFSET LENGTH")
    try:
        off = int(argv[1])
        length = int(argv[2])
    except ValueError:
        fail("invalid offset or length")
    serve_range(sys.stdout.buffer, argv[0], off, length)


main(sys.argv[1:])
