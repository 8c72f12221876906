# SPDX-License-Identifier: Apache-2.0
"""test_trace_input.py — how `kvpool replay` and `sweep` read a trace.

Covers the input side of the command-line tool (tools/trace.c):
- a trace arrives whole through a pipe, `/dev/stdin`, `-` (standard input)
  and a FIFO, plain or gzip, and gives the same answer as the file;
- what is not a trace is refused with one line `kvpool: FILE[:LINE]: ...`
  and exit status 1: an empty or blank input, an input_length that does not
  need exactly len(hash_ids) blocks of 512 tokens (so token totals cannot
  wrap), data after the gzip stream, negative, non-integer or repeated
  fields, a line longer than 1 MiB; consecutive gzip members are one stream;
- memory is bounded by the longest line, not the file, and running out of
  it is reported as "out of memory" (address-space limit in the child).

Refusals run under the AddressSanitizer build too when it exists
(build-asan/kvpool); the memory-limit cases run the normal build only
(ASan reserves terabytes of address space).
"""
import gzip
import json
import os
import resource
import subprocess
import threading

import pytest

from test_cli import KVPOOL, binaries  # the binaries under test, as test_cli runs them

MAX_LINE = 1 << 20           # KVPT_TRACE_MAX_LINE (tools/trace.h)
TIMING = ("seconds", "load_seconds", "blocks_per_second", "trace")

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")


def run(*args, binary=KVPOOL, stdin=b"", limit=None, timeout=60):
    """Run kvpool with args, `stdin` bytes on a pipe, and an address-space
    limit of `limit` bytes when given; returns the CompletedProcess."""
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return subprocess.run([str(binary), *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout, preexec_fn=limit_memory if limit else None)


def line(inp, ids, **extra):
    """One trace line (bytes, with its newline)."""
    obj = {"timestamp": 0, "input_length": inp, "output_length": 1, "hash_ids": ids, **extra}
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def synthetic(n=3000):
    """A trace of n requests (about 150 KB, many read() chunks): 37
    conversations whose prompts grow turn by turn, so prefixes repeat."""
    out, convs, next_id = [], [[] for _ in range(37)], 0
    for i in range(n):
        ids = convs[i % 37]
        for _ in range(1 + i % 3):
            ids.append(next_id)
            next_id += 1
        del ids[:-20]  # keep requests short; the prefix moves on
        out.append(line(512 * len(ids) - i % 511, list(ids)))
    return b"".join(out)


def result(p):
    """The --json object of a successful run, without timings and path."""
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    return {k: v for k, v in r.items() if k not in TIMING}


def refused(p, *mentions):
    """Exit 1 (not a signal or sanitizer abort), no output, one error line
    that mentions every string in `mentions`."""
    err = p.stderr.decode()
    assert p.returncode == 1, (p.returncode, err)
    assert "Sanitizer" not in err and "runtime error" not in err
    assert p.stdout == b""
    assert err.startswith("kvpool: ") and err.count("\n") == 1, err
    for m in mentions:
        assert m in err, (m, err)


@pytest.fixture(scope="module")
def trace_bytes():
    return synthetic()


@pytest.fixture(scope="module")
def expected(tmp_path_factory, trace_bytes):
    path = tmp_path_factory.mktemp("ref") / "t.jsonl"
    path.write_bytes(trace_bytes)
    r = result(run("replay", path, "--capacity", 40, "--json"))
    assert r["requests"] == 3000
    return r


# ---- reading once: pipes, standard input, FIFOs -----------------------------

@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", ["/dev/stdin", "-"])
def test_pipe_gives_the_whole_trace(trace_bytes, expected, name, compress):
    data = gzip.compress(trace_bytes) if compress else trace_bytes
    assert result(run("replay", name, "--capacity", 40, "--json", stdin=data)) == expected


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_fifo_gives_the_whole_trace(tmp_path, trace_bytes, expected, compress):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    data = gzip.compress(trace_bytes) if compress else trace_bytes

    def feed():
        try:
            with open(fifo, "wb") as f:
                f.write(data)
        except BrokenPipeError:  # the reader went away early: its result says so
            pass
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    # A reader that opened the FIFO twice would wait for a second writer
    # forever: the timeout turns that into a failure.
    p = run("replay", fifo, "--capacity", 40, "--json", timeout=30)
    writer.join(10)
    assert result(p) == expected


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_bad_line_on_a_pipe_left_open_is_refused_at_once(binary, compress):
    """The input is read ahead on a thread of its own: a refused line must
    end the command although the writer neither writes more nor closes."""
    good = line(512, [0])
    data = good + b"{bad\n"
    if compress:  # then half of a stream that goes on: the writer stops mid-member
        data = gzip.compress(data + os.urandom(1 << 16))
        data = data[: len(data) // 2]
    p = subprocess.Popen([str(binary), "replay", "-", "--capacity", "10"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data)
        p.stdin.flush()
        rc = p.wait(timeout=20)  # a hang fails here instead of blocking the suite
    finally:
        p.kill()
        p.stdin.close()
        out, err = p.stdout.read(), p.stderr.read()
    assert rc == 1 and out == b"", err
    assert b"standard input:2: bad JSON" in err and b"Sanitizer" not in err, err


def test_sweep_reads_standard_input(trace_bytes, expected):
    p = run("sweep", "-", "--capacities", 40, stdin=trace_bytes)
    assert p.returncode == 0, p.stderr
    row = p.stdout.decode().splitlines()[2].split()
    assert row[:6] == ["-", "40", "3000", str(expected["rejected"]),
                       str(expected["blocks_requested"]), str(expected["blocks_hit"])]


# ---- refusing what is not a trace -------------------------------------------

@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("content", [b"", b"\n", b"  \r\n\t\n\n"], ids=["empty", "newline", "blank"])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_empty_or_blank_input_is_refused(tmp_path, binary, content, compress):
    path = tmp_path / ("t.jsonl.gz" if compress else "t.jsonl")
    path.write_bytes(gzip.compress(content) if compress else content)
    refused(run("replay", path, "--capacity", 10, binary=binary), f"{path}: not a trace")
    data = path.read_bytes()
    refused(run("replay", "-", "--capacity", 10, stdin=data, binary=binary),
            "standard input: not a trace")


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_token_total_cannot_wrap(tmp_path, binary):
    path = tmp_path / "t.jsonl"
    path.write_bytes(line(2**63 - 1, [0]) * 3)
    refused(run("replay", path, "--capacity", 10, binary=binary), f"{path}:1: ",
            "input_length 9223372036854775807 needs 18014398509481984 hash ids")


# (input_length, hash_ids) that break len(hash_ids) == ceil(input_length / 512)
INCONSISTENT = {
    "too_few_ids": (600, [0]),
    "too_many_ids": (512, [0, 1]),
    "zero_length": (0, [0]),
    "far_too_long": (10**12, [0, 1, 2]),
}


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("case", sorted(INCONSISTENT))
def test_input_length_must_match_hash_ids(tmp_path, binary, case):
    inp, ids = INCONSISTENT[case]
    path = tmp_path / "t.jsonl"
    path.write_bytes(line(512, [0]) + line(inp, ids) + line(512, [0]))
    refused(run("replay", path, "--capacity", 10, binary=binary), f"{path}:2: ",
            f"input_length {inp} needs", f"hash_ids has {len(ids)}")


def test_input_length_boundaries_are_accepted(tmp_path):
    """1..512 tokens is one block, 513 two: the last block may be partial."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(line(1, [0]) + line(512, [0]) + line(513, [0, 1]) + line(1024, [0, 1]))
    r = json.loads(run("replay", path, "--capacity", 10, "--json").stdout)
    assert (r["requests"], r["blocks_requested"], r["tokens_requested"]) == (4, 6, 2050)


GOOD = line(600, [0, 1])
BAD_FIELDS = {
    "negative_timestamp": (b'{"timestamp": -1, "input_length": 600, "output_length": 5, '
                           b'"hash_ids": [0, 1]}', "negative timestamp"),
    "real_timestamp": (b'{"timestamp": 1.5, "input_length": 600, "output_length": 5, '
                       b'"hash_ids": [0, 1]}', '"timestamp" must be an integer'),
    "real_input_length": (b'{"timestamp": 0, "input_length": 600.0, "output_length": 5, '
                          b'"hash_ids": [0, 1]}', '"input_length" must be an integer'),
    "exponent_output_length": (b'{"timestamp": 0, "input_length": 600, "output_length": 1e3, '
                               b'"hash_ids": [0, 1]}', '"output_length" must be an integer'),
    "bool_output_length": (b'{"timestamp": 0, "input_length": 600, "output_length": true, '
                           b'"hash_ids": [0, 1]}', '"output_length" must be an integer'),
    "hash_id_beyond_int64": (b'{"timestamp": 0, "input_length": 600, "output_length": 5, '
                             b'"hash_ids": [0, 18446744073709551616]}', "bad JSON"),
    "repeated_key": (b'{"timestamp": 0, "input_length": 600, "output_length": 5, '
                     b'"hash_ids": [0, 1], "input_length": 100}', "bad JSON"),
    "trailing_text": (GOOD.rstrip() + b" x", "bad JSON"),
}


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_bad_field_names_file_and_line(tmp_path, binary, case, compress):
    bad, why = BAD_FIELDS[case]
    text = GOOD + GOOD + bad + b"\n" + GOOD
    path = tmp_path / ("t.jsonl.gz" if compress else "t.jsonl")
    path.write_bytes(gzip.compress(text) if compress else text)
    refused(run("replay", path, "--capacity", 100, binary=binary), f"{path}:3: ", why)


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
def test_error_quotes_no_control_bytes(tmp_path, binary):
    """jansson quotes the bad token; a terminal escape in the file must not
    reach stderr, and the error stays one line."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b'{"timestamp": \x1b[2J\r\x01}\n')
    p = run("replay", path, "--capacity", 10, binary=binary)
    refused(p, f"{path}:2: bad JSON")
    assert all(0x20 <= c < 0x7f for c in p.stderr.rstrip(b"\n")), p.stderr


# ---- gzip: members, and nothing after them ---------------------------------

@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("tail", [b"garbage\n", b"\0" * 8, b"\x1f", b"\x1f\x8b"],
                         ids=["text", "zeros", "half_magic", "bare_magic"])
def test_data_after_gzip_stream_is_refused(tmp_path, binary, trace_bytes, tail):
    packed = gzip.compress(trace_bytes)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(packed + tail)
    p = run("replay", path, "--capacity", 40, binary=binary)
    if tail == b"\x1f\x8b":  # the start of a member that never comes
        refused(p, str(path), "corrupt gzip data")
    else:
        refused(p, str(path), f"data after the end of the gzip stream (at byte {len(packed)})")


def test_concatenated_gzip_members_are_one_trace(tmp_path, trace_bytes, expected):
    """`cat a.gz b.gz` is gzip of a + b (RFC 1952, gzip -d): accepted."""
    half = trace_bytes.index(b"\n", len(trace_bytes) // 2) + 1
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(trace_bytes[:half]) + gzip.compress(trace_bytes[half:]))
    assert result(run("replay", path, "--capacity", 40, "--json")) == expected


# ---- bounded memory ---------------------------------------------------------

def padded(length):
    """A valid one-request line of exactly `length` bytes (without newline)."""
    empty = line(512, [0], pad="").rstrip(b"\n")
    return line(512, [0], pad="x" * (length - len(empty))).rstrip(b"\n")


@pytest.mark.parametrize("binary", binaries(), ids=lambda b: b.parent.name)
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_line_length_bound(tmp_path, binary, compress):
    path = tmp_path / ("t.jsonl.gz" if compress else "t.jsonl")
    pack = gzip.compress if compress else bytes
    path.write_bytes(pack(GOOD + padded(MAX_LINE) + b"\n" + GOOD))
    r = json.loads(run("replay", path, "--capacity", 10, "--json", binary=binary).stdout)
    assert r["requests"] == 3
    path.write_bytes(pack(GOOD + padded(MAX_LINE + 1) + b"\n" + GOOD))
    refused(run("replay", path, "--capacity", 10, binary=binary),
            f"{path}:2: line longer than {MAX_LINE} bytes")
    # no newline at all: refused once the bound is passed, not read whole
    path.write_bytes(pack(GOOD + b"[" * (8 * MAX_LINE)))
    refused(run("replay", path, "--capacity", 10, binary=binary),
            f"{path}:2: line longer than {MAX_LINE} bytes")


@pytest.fixture(scope="module")
def base_memory(tmp_path_factory):
    """The smallest address-space limit (1 MiB steps) under which kvpool
    replays a one-line trace: the binary, its libraries and its buffers."""
    path = tmp_path_factory.mktemp("base") / "t.jsonl"
    path.write_bytes(GOOD)
    for mib in range(8, 1025):
        if run("replay", path, "--capacity", 1, limit=mib << 20).returncode == 0:
            return mib << 20
    pytest.skip("kvpool does not run under a 1 GiB address-space limit")


def test_memory_is_bounded_by_the_line_not_the_file(tmp_path, base_memory):
    """128 MiB of text in lines of 1 MiB loads in 48 MiB more than a
    one-line trace.  (gzip members keep the file itself small.)"""
    member = gzip.compress(padded(MAX_LINE - 1) + b"\n")
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(member * 128)
    p = run("replay", path, "--capacity", 10, "--json", limit=base_memory + (48 << 20))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["requests"] == 128


def test_out_of_memory_is_reported_as_such(tmp_path, base_memory):
    """A 1 MiB line of 524,000 hash ids needs tens of MiB to parse; with 8
    MiB to spare that fails, and the error says so (not "bad JSON")."""
    n = MAX_LINE // 2 - 300
    big = line(512 * n, [0] * n)
    assert len(big) <= MAX_LINE
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + big)
    p = run("replay", path, "--capacity", 1, limit=base_memory + (8 << 20))
    refused(p, f"{path}:2: out of memory")
    # and with room to spare the same file loads
    assert run("replay", path, "--capacity", 1).returncode == 0
