#!/usr/bin/python3
"""
Write the hand-made seed inputs of the fuzz corpus into
test/fuzz/corpus/<target>/seed-*.  Run once before fuzzing a fresh
corpus; "make -C test/fuzz merge" keeps what the fuzzer finds beside them
(minimised).  Seeds are named by content, so rerunning is idempotent.

The queue input format is described at the top of checks.c.
"""

import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    name = 'seed-' + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def every_plane():
    """One character of every Unicode plane, plus awkward ones."""
    chars = [chr(p * 0x10000 + 0x100) for p in range(17)]
    chars += ['\u00e9', '\u0085', '\u200b', '\u2028', '\u202e', '\ufeff',
              '\uffff', '\U0001f600', '\U000e0001', '\U0010ffff']
    return ''.join(chars)


ENCODE = [
    b'nightly-rollup', b'app/nightly', b'a/b/c/d', b'.', b'..', b'...',
    b'./a', b'../a', b'a/..', b'a/../b', b'../../zookeeper', b'/', b'//',
    b'/a', b'a/', b'a//b', b'%', b'%2E%2E', b'%%', b'100%', b'a b',
    b'\x00', b'a\x00b', bytes(range(1, 32)) + b'\x7f', b'\t\n\r',
    b'zookeeper', b'.zklock', b'-', b'_', b'~', b'\\..\\..',
    'caf\u00e9'.encode(), every_plane().encode(),
    b'\xff\xfe\x80', b'\xc3\x28', b'\xed\xa0\x80', b'\xf4\x90\x80\x80',
    b'a' * 512, b'a' * 513, b'a' * 600, b'%' * 512, b'/' * 40,
    b'./' * 200 + b'x', b'.' * 512, (b'x/' * 256)[:-1],
    '\U0001f600'.encode() * 128, '\u00e9'.encode() * 257,
]

MARKERS = [b'lock-', b'__lock__', b'__rlock__', b'__WRIT__', b'__READ__']
UUID = bytes(range(16))


def header(flags=0, pos=0, seq=5, own=0, uuid=UUID):
    return bytes([flags, pos]) + struct.pack('<I', seq) + bytes([own]) + uuid


def names(*ns):
    return b'\n'.join(ns)


def record(kind, seq, prefix=0):
    return bytes([kind]) + struct.pack('<I', seq & 0xFFFFFFFF) + bytes([prefix])


QUEUE = [
    header(),
    header() + names(b'_c_0f8fad5b-d9cb-469f-a165-70867728950e-__WRIT__0000000004'),
    header(flags=1) + names(b'x__READ__0000000003', b'y__WRIT__0000000004',
                            b'z__READ__0000000006'),
    header(flags=2, pos=1) + names(b'lock-0000000001', b'lock-0000000009'),
    header(flags=4 | 1, pos=2, seq=10) + names(
        b'abc__rlock__0000000008', b'abc__lock__0000000009', b'foo'),
    header(flags=8, pos=1) + names(b'leader', b'__WRIT__0000000002',
                                   b'__READ__0000000001'),
    header(flags=8 | 1, pos=0) + names(b'__READ__0000000007', b'lock-0000000005'),
    # wrapped counters around 2^31 and 2^32
    header(seq=0xFFFFFFFF) + names(b'__WRIT__2147483647', b'__WRIT__-2147483648',
                                   b'__READ__-000000002', b'lock-0000000000'),
    header(seq=0x80000001, own=0x5) + names(
        b'__WRIT__2147483647', b'_c_x-__WRIT__-2147483648', b'__READ__2147483646'),
    # out-of-range and malformed numbers
    header(flags=8) + names(b'__WRIT__9999999999', b'__WRIT__-9999999999',
                            b'__WRIT__4294967295', b'__WRIT__-2147483649',
                            b'lock-00000000001', b'lock--00000001',
                            b'__READ__+000000001', b'__READ__--000000001'),
    # greedy prefixes and look-alikes
    header(flags=8) + names(b'__READ__lock-0000000005', b'lock-__READ__0000000005',
                            b'xlock--000000001', b'alock-lock--0123456789',
                            b'__rlock____lock__0000000001', b'lock-lock-0000000003'),
    header(flags=8) + names(b'', b'\x00', b'\xff\xfe', b'/', b'..',
                            b'a' * 3000 + b'__WRIT__0000000001'),
    # structured records: many contenders, mixed forms
    header(flags=16, pos=3, seq=100) + b''.join(
        record(k, 90 + k) for k in range(36)),
    header(flags=16 | 1, pos=7, seq=0x7FFFFFF0, own=0xAA) + b''.join(
        record(k * 5 + 3, 0x7FFFFFE0 + 3 * k, k) for k in range(40)),
    header(flags=16 | 8, pos=11) + b''.join(
        record(k * 7, (k * 0x3FFFFFFF) & 0xFFFFFFFF, k % 3) for k in range(30)),
]


def main():
    for data in ENCODE:
        write('encode', data)
    for data in QUEUE:
        write('queue', data)
    for target in ('encode', 'queue'):
        print('%s: %d files' % (target, len(os.listdir(
            os.path.join(HERE, 'corpus', target)))))


if __name__ == '__main__':
    main()
