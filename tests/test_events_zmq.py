# SPDX-License-Identifier: Apache-2.0
"""test_events_zmq.py — kvpool's KV-cache events publisher end to end.

A Python subscriber (Debian python3-zmq, python3-msgpack) receives the
scripted scenario of `kvpool events-demo` over loopback TCP and checks what
vLLM-compatible routers rely on (docs/EVENTS.md):
  - exactly three frames per message: topic, sequence (8 bytes BE), payload;
  - sequence numbers 0, 1, 2, ... with no gap;
  - every payload decodes as [ts, [events...], dp_rank] with each event a
    tagged positional array of the documented length and field types, and
    re-encodes to the very same bytes (shortest msgpack forms);
  - every stored parent was announced before and not removed since; a stored
    hash is new, a removed one is known;
  - the subscriber's final set equals kvpool's own indexed hashes, and every
    event equals kvpool's own view of it (the demo prints both);
  - token ids are the scenario's;
  - with a tiny event queue the drop counter counts, the stream tells the
    subscriber to forget (AllBlocksCleared), and the subscriber stays
    consistent (a subset of the index);
  - replay returns the missed batches byte for byte, then (-1, b"").
Also `kvpool events` (the subscriber CLI, JSON lines) and
`kvpool replay --events` with a tiny trace.  Loopback only; every wait is
bounded.
"""
import json
import os
import select
import signal
import subprocess
import time

import pytest

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("KVP_BUILD_DIR", os.path.join(ROOT, "build"))
KVPOOL = os.path.join(BUILD, "kvpool")
TOPIC = "kv@127.0.0.1@kvpool-demo"
U64 = 1 << 64


def _have_interop():
    if not os.access(KVPOOL, os.X_OK):
        return False
    r = subprocess.run([KVPOOL, "events-demo", "--help"], capture_output=True, timeout=10)
    return r.returncode == 0


pytestmark = pytest.mark.skipif(not _have_interop(),
                                reason="build/kvpool without the interop part")


# ---- helpers ----------------------------------------------------------------

def pump(socks):
    """Let bound sockets attach newly connected peers.  libzmq does that only
    inside a call on the socket, so a subscriber that binds must keep calling
    into its socket for its subscription to reach a publisher that connects
    (and for that publisher's XPUB to see it)."""
    for s in socks:
        s.getsockopt(zmq.EVENTS)


def read_line(proc, timeout=10.0, socks=()):
    """One line of the demo's stdout (unbuffered pipe), within `timeout`,
    pumping `socks` meanwhile."""
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no line from kvpool within %.0fs (got %r)" % (timeout, buf))
        pump(socks)
        r, _, _ = select.select([proc.stdout], [], [], min(left, 0.02))
        if r:
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                raise AssertionError("kvpool closed stdout; stderr: %r" % proc.stderr.read())
            buf += chunk
    return json.loads(buf)


def start_demo(endpoint, *args):
    return subprocess.Popen([KVPOOL, "events-demo", endpoint, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def finish(proc):
    proc.stdin.close()
    try:
        rc = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert rc == 0, proc.stderr.read()


def recv_frames(sock, timeout_ms=5000):
    assert sock.poll(timeout_ms), "no message within %d ms" % timeout_ms
    return sock.recv_multipart()


def check_event_shape(ev):
    """The documented positional layout and field types of one event."""
    assert isinstance(ev, list) and ev and isinstance(ev[0], str)
    tag = ev[0]
    if tag == "BlockStored":
        assert len(ev) == 12
        (_, hashes, parent, tokens, bs, lora_id, medium, lora_name, extra, group,
         spec_kind, spec_window) = ev
        assert hashes and all(isinstance(h, int) and 0 < h < U64 for h in hashes)
        assert parent is None or (isinstance(parent, int) and 0 < parent < U64)
        assert isinstance(tokens, list) and all(isinstance(t, int) and t >= 0 for t in tokens)
        assert bs == 4 and len(tokens) in (0, len(hashes) * bs)
        assert lora_id is None and medium == "GPU" and group == 0
        assert lora_name is None or isinstance(lora_name, str)
        assert extra is None or (len(extra) == len(hashes) and
                                 all(isinstance(k, list) for k in extra))
        assert spec_kind is None and spec_window is None
    elif tag == "BlockRemoved":
        assert len(ev) == 4
        _, hashes, medium, group = ev
        assert hashes and all(isinstance(h, int) and 0 < h < U64 for h in hashes)
        assert medium == "GPU" and group == 0
    else:
        assert ev == ["AllBlocksCleared"]


class Subscriber:
    """What a router keeps: the set of hashes the engine holds."""

    def __init__(self):
        self.known = set()
        self.stored = []

    def apply(self, events):
        for ev in events:
            if ev[0] == "BlockStored":
                parent = ev[2]
                assert parent is None or parent in self.known, \
                    "parent %d was never announced or was removed" % parent
                for h in ev[1]:
                    assert h not in self.known, "hash %d announced twice" % h
                    self.known.add(h)
                self.stored.append(ev)
            elif ev[0] == "BlockRemoved":
                for h in ev[1]:
                    assert h in self.known, "removed %d, which was never announced" % h
                    self.known.remove(h)
            else:
                self.known.clear()


def receive_batches(sub, count, topic=TOPIC):
    """`count` messages: 3 frames, the topic, sequence numbers 0..count-1."""
    out = []
    for want in range(count):
        frames = recv_frames(sub)
        assert len(frames) == 3, "expected 3 frames, got %d" % len(frames)
        t, seq, payload = frames
        assert t == topic.encode()
        assert len(seq) == 8
        assert int.from_bytes(seq, "big") == want, "gap or reorder in sequence numbers"
        batch = msgpack.unpackb(payload, raw=False)
        assert isinstance(batch, list) and len(batch) == 3
        ts, events, dp = batch
        assert isinstance(ts, float) and abs(ts - time.time()) < 3600
        assert dp is None
        for ev in events:
            check_event_shape(ev)
        # the exact bytes: python's msgpack re-encodes the decoded batch to
        # the very same bytes (shortest ints, str8, float64)
        assert msgpack.packb(batch, use_bin_type=True) == payload
        out.append((want, payload, events))
    if sub.poll(200):  # the publisher is gone: it ended its stream
        assert is_end_marker(sub.recv_multipart(), count, topic)
    assert not sub.poll(200), "more messages than the demo says it sent"
    return out


def is_end_marker(frames, seq, topic):
    """The end-of-stream marker: an empty batch numbered `seq`."""
    t, s, payload = frames
    ts, events, dp = msgpack.unpackb(payload, raw=False)
    return (t == topic.encode() and int.from_bytes(s, "big") == seq and events == [] and
            dp is None and abs(ts - time.time()) < 3600)


def same_as_view(events, view_batch):
    """A received batch against kvpool's own view of it."""
    assert len(events) == len(view_batch)
    for ev, v in zip(events, view_batch):
        assert ev[0] == v["type"]
        if ev[0] == "BlockStored":
            assert ev[1] == v["block_hashes"]
            assert ev[2] == v["parent_block_hash"]
            assert ev[3] == v["token_ids"]
            assert ev[4] == v["block_size"]
            assert ev[6] == v["medium"] and ev[7] == v["lora_name"]
            assert (ev[8] is None) == (v["n_mm"] == 0)
        elif ev[0] == "BlockRemoved":
            assert ev[1] == v["block_hashes"] and ev[2] == v["medium"]


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


# ---- the scenario -----------------------------------------------------------

def test_scenario_and_replay(ctx):
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    # --connect: the demo connects to us
    proc = start_demo("tcp://127.0.0.1:%d" % port, "--connect", "--replay", "tcp://127.0.0.1:*",
                      "--events-wait", "5", "--hold", "30")
    try:
        ready = read_line(proc, socks=[sub])
        assert ready["endpoint"] == "tcp://127.0.0.1:%d" % port
        assert ready["replay_endpoint"].startswith("tcp://127.0.0.1:")
        done = read_line(proc, socks=[sub])
        assert done["done"] and done["events_dropped"] == 0
        assert done["stats_events_dropped"] == 0
        batches = receive_batches(sub, done["batches"])
        assert done["batches"] == len(done["view"]) >= 6
        assert done["events_sent"] == sum(len(e) for _, _, e in batches)

        model = Subscriber()
        for (_, _, events), view in zip(batches, done["view"]):
            same_as_view(events, view)
            model.apply(events)
        assert model.known == set(done["indexed"])  # kvpool's own index

        # the scenario's tokens and chain (docs/EVENTS.md, tools/events.c)
        st = model.stored
        a = st[0]
        assert a[3] == list(range(1000, 1016)) and a[2] is None and len(a[1]) == 4
        hit = st[1]  # prompt B hits A's first two blocks
        assert hit[3] == list(range(2000, 2004)) and hit[2] == a[1][1]
        app = st[2]  # the append fills A's fifth block
        assert app[3] == list(range(1016, 1020)) and app[2] == a[1][3]
        c = st[3]
        assert c[3] == list(range(3000, 3032)) and len(c[1]) == 8 and c[2] is None
        lora = st[4]
        assert lora[7] == "demo-lora" and lora[3] == list(range(4000, 4008))
        img = bytes(range(0xa0, 0xc0)).hex()
        # one entry per block, listing the inputs that block overlaps: the
        # image spans tokens [1, 3), all in the first block (docs/EVENTS.md)
        assert lora[8] == [[img], []]
        kinds = [ev[0] for _, _, evs in batches for ev in evs]
        assert "BlockRemoved" in kinds and "AllBlocksCleared" in kinds
        # reusing cached blocks for prompt C removes them in the same batch
        assert any(evs[0][0] == "BlockRemoved" and evs[-1] == c for _, _, evs in batches)

        # replay: pretend batches 2.. were missed
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(ready["replay_endpoint"])
        dealer.send_multipart([b"", (2).to_bytes(8, "big")])
        got = []
        while True:
            frames = recv_frames(dealer)
            assert len(frames) == 3 and frames[0] == b""
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == -1:
                assert frames[2] == b""
                break
            got.append((seq, frames[2]))
            assert len(got) <= len(batches)
        assert got == [(s, p) for s, p, _ in batches[2:]]
        # a start past the end: only the end marker
        dealer.send_multipart([b"", (10 ** 6).to_bytes(8, "big")])
        frames = recv_frames(dealer)
        assert frames == [b"", (-1).to_bytes(8, "big", signed=True), b""]
    finally:
        finish(proc)


def test_bind_mode_waits_for_subscriber(ctx):
    # by default the demo binds, and waits (XPUB) for us
    proc = start_demo("tcp://127.0.0.1:*", "--events-wait", "10", "--topic", "kv@pod@model")
    try:
        ready = read_line(proc)
        assert "*" not in ready["endpoint"] and ready["replay_endpoint"] is None
        sub = ctx.socket(zmq.SUB)
        sub.connect(ready["endpoint"])
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@pod@")
        done = read_line(proc)
        batches = receive_batches(sub, done["batches"], topic="kv@pod@model")
        model = Subscriber()
        for _, _, events in batches:
            model.apply(events)
        assert model.known == set(done["indexed"])
    finally:
        finish(proc)


def test_small_queue_drops_are_counted(ctx):
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    # a queue of 2 hashes, drained only every 3 steps: the pool must drop
    proc = start_demo("tcp://127.0.0.1:%d" % port, "--connect", "--event-capacity", "2",
                      "--drain-every", "3", "--events-wait", "5")
    try:
        read_line(proc, socks=[sub])
        done = read_line(proc, socks=[sub])
        assert done["events_dropped"] > 0
        assert done["stats_events_dropped"] == done["events_dropped"]
        batches = receive_batches(sub, done["batches"])
        model = Subscriber()
        cleared = 0
        for (_, _, events), view in zip(batches, done["view"]):
            same_as_view(events, view)
            model.apply(events)
            cleared += sum(ev[0] == "AllBlocksCleared" for ev in events)
        assert cleared >= 2  # the drop's, besides the scenario's reset
        # never a stale view: what the subscriber believes, the pool holds
        assert model.known <= set(done["indexed"])
    finally:
        finish(proc)


def test_events_cli_json(ctx):
    ev = subprocess.Popen([KVPOOL, "events", "tcp://127.0.0.1:*", "--bind", "--json",
                           "--topic", "kv@",
                           "--timeout", "10", "--count", "3"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = b""
        deadline = time.monotonic() + 10
        while b"listening on " not in line:
            assert time.monotonic() < deadline
            r, _, _ = select.select([ev.stderr], [], [], 1)
            if r:
                line += os.read(ev.stderr.fileno(), 256)
        endpoint = line.split(b"listening on ")[1].split()[0].decode()
        demo = start_demo(endpoint, "--connect", "--events-wait", "5")
        read_line(demo)
        done = read_line(demo)
        finish(demo)
        out, _ = ev.communicate(timeout=15)
    finally:
        if ev.poll() is None:
            ev.kill()
    assert ev.returncode == 0
    lines = [json.loads(x) for x in out.decode().splitlines()]
    assert [x["seq"] for x in lines] == [0, 1, 2]
    first = lines[0]
    assert first["topic"] == TOPIC and first["dp_rank"] is None
    stored = first["events"][0]
    assert stored["type"] == "BlockStored"
    assert stored["block_hashes"] == done["view"][0][0]["block_hashes"]
    assert stored["token_ids"] == list(range(1000, 1016))
    assert stored["parent_block_hash"] is None and stored["group_idx"] == 0
    assert stored["medium"] == "GPU" and stored["lora_id"] is None


def test_replay_publishes(ctx, tmp_path):
    trace = tmp_path / "t.jsonl"
    reqs = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3]]
    with open(trace, "w") as f:
        for i, ids in enumerate(reqs):
            f.write(json.dumps({"timestamp": i, "input_length": 512 * len(ids),
                                "output_length": 1, "hash_ids": ids}) + "\n")
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    proc = subprocess.Popen([KVPOOL, "replay", str(trace), "--capacity", "4", "--json",
                             "--events", "tcp://127.0.0.1:%d" % port, "--events-connect",
                             "--topic", "kv@a@b",
                             "--events-wait", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    out = read_line(proc, socks=[sub])  # the replay's JSON result
    assert out["requests"] == 4
    assert proc.wait(timeout=15) == 0, proc.stderr.read()
    model = Subscriber()
    seqs = []
    while sub.poll(1000):
        t, seq, payload = sub.recv_multipart()
        assert t == b"kv@a@b"
        seqs.append(int.from_bytes(seq, "big"))
        events = msgpack.unpackb(payload, raw=False)[1]
        for e in events:
            if e[0] == "BlockStored":  # replay publishes hashes only: id + 1
                assert e[2] is None and e[3] == [] and e[4] == 512
        model.apply(events)
    assert seqs == list(range(len(seqs))) and len(seqs) >= 3
    # capacity 4: request 3 evicts; the last request re-stores 1, 2, 3
    stored = [h for e in model.stored for h in e[1]]
    assert stored[:3] == [2, 3, 4]
    assert model.known <= {2, 3, 4, 5, 6, 7}


# ---- hostile peers: every receive is bounded ----------------------------------

def vm_hwm_kb(pid):
    """Peak resident memory of a live process, in kB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % pid)


def zmtp_peer(endpoint, socket_type):
    """A raw ZMTP 3.0 peer over TCP: greeting and READY, no libzmq (whose own
    sockets keep every filter they send in a trie)."""
    import socket
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\0" * 16 + b"\0" * 32
    assert len(greeting) == 64
    s.sendall(greeting)
    theirs = b""
    while len(theirs) < 64:  # the peer's greeting first, as ZMTP has it
        chunk = s.recv(64 - len(theirs))
        assert chunk, "the publisher closed the connection during the greeting"
        theirs += chunk
    body = b"\x05READY" + b"\x0bSocket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    s.sendall(b"\x04" + bytes([len(body)]) + body)
    return s


def send_long_frame(s, body, more=False):
    """One frame with an 8-byte size; returns False when the publisher hung
    up on us part way (what it does past its bound)."""
    try:
        s.sendall(bytes([0x02 | (1 if more else 0)]) + len(body).to_bytes(8, "big") + body)
        return True
    except OSError:
        return False


def hung_up(s, timeout=5.0):
    """Did the publisher close the connection within `timeout`?"""
    deadline = time.monotonic() + timeout
    s.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            if s.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


@pytest.mark.parametrize("target", ["subscription", "replay_request"])
def test_oversized_frames_are_refused_with_bounded_memory(ctx, target):
    # the demo binds both sockets on loopback and waits for an honest
    # subscriber; a hostile peer first sends one oversized frame
    proc = start_demo("tcp://127.0.0.1:*", "--replay", "tcp://127.0.0.1:*",
                      "--events-wait", "15", "--hold", "30")
    try:
        ready = read_line(proc)
        before = vm_hwm_kb(proc.pid)
        if target == "subscription":  # 1 + 8 MiB filter (bound: 256 bytes)
            s = zmtp_peer(ready["endpoint"], b"SUB")
            send_long_frame(s, b"\x01" + b"k" * (8 << 20))
        else:  # a 100 MiB replay request (bound: 64 bytes)
            s = zmtp_peer(ready["replay_endpoint"], b"DEALER")
            send_long_frame(s, b"", more=True)
            send_long_frame(s, b"\0" * (100 << 20))
        assert hung_up(s), "the publisher kept reading an oversized %s" % target
        s.close()

        # publishing goes on: an honest subscriber gets every batch, and
        # replay answers
        sub = ctx.socket(zmq.SUB)
        sub.connect(ready["endpoint"])
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        done = read_line(proc, timeout=20)
        batches = receive_batches(sub, done["batches"])
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(ready["replay_endpoint"])
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        got = []
        for _ in range(len(batches) + 1):
            frames = recv_frames(dealer)
            if int.from_bytes(frames[1], "big", signed=True) == -1:
                break
            got.append(frames[2])
        assert got == [p for _, p, _ in batches]
        grew = vm_hwm_kb(proc.pid) - before
        assert grew < 32 * 1024, "peak memory grew by %d kB" % grew
    finally:
        finish(proc)


def free_loopback_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trace_file(tmp_path):
    trace = tmp_path / "t.jsonl"
    with open(trace, "w") as f:
        for i, ids in enumerate([[1, 2, 3], [1, 2, 4], [5, 6]]):
            f.write(json.dumps({"timestamp": i, "input_length": 512 * len(ids),
                                "output_length": 1, "hash_ids": ids}) + "\n")
    return trace


def test_replay_binds_a_fixed_loopback_port(ctx, tmp_path):
    # a fixed port on loopback is bound (no '*' needed); the subscriber connects
    port = free_loopback_port()
    sub = ctx.socket(zmq.SUB)
    sub.connect("tcp://127.0.0.1:%d" % port)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    proc = subprocess.Popen([KVPOOL, "replay", str(trace_file(tmp_path)), "--capacity", "8",
                             "--json", "--events", "tcp://127.0.0.1:%d" % port,
                             "--events-wait", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        read_line(proc, timeout=20, socks=[sub])
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    msgs = []
    while sub.poll(1000):
        msgs.append(sub.recv_multipart())
    assert [int.from_bytes(m[1], "big") for m in msgs] == [0, 1, 2, 3], err
    assert is_end_marker(msgs[-1], 3, "")
    assert "published" in err and "no subscriber" not in err


def test_replay_says_when_no_subscriber_connected(tmp_path):
    # both sides connect (nobody binds): kvpool must not claim success
    port = free_loopback_port()
    p = subprocess.run([KVPOOL, "replay", str(trace_file(tmp_path)), "--capacity", "8",
                        "--events", "tcp://127.0.0.1:%d" % port, "--events-connect",
                        "--events-wait", "0.2"], capture_output=True, timeout=30)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "no subscriber connected to tcp://127.0.0.1:%d" % port in err
    assert "reached no one" in err and "published" not in err


# ---- the subscriber: safe output whatever the publisher sends -----------------

def no_control_chars(data):
    """No C0 (but newline), DEL or C1 control character in UTF-8 bytes."""
    text = data.decode("utf-8")  # strict: raises on invalid UTF-8
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
    assert not bad, "control characters %r in %r" % (bad, text[:200])


def reject_constant(name):
    raise AssertionError("non-JSON constant %s in the output" % name)


def hostile_payloads():
    """(topic, payload) pairs a hostile or buggy publisher might send."""
    raw_str = msgpack.Packer(use_bin_type=False)  # bytes -> msgpack str
    stored = ["BlockStored", [1], None, [], 4, None, "GPU\x1b[2J", "\u009b31m\x07lora",
              None, 0, None, None]
    return [
        (b"kv@a", msgpack.packb([float("nan"), [["AllBlocksCleared"]], None])),
        (b"kv@\xff\x1b[0m", msgpack.packb([float("inf"), [stored], None])),
        (b"kv@a", raw_str.pack([1.0, [["BlockRemoved", [2], b"\xff\xfe\x80GPU", 0]], None])),
        (b"kv@a", msgpack.packb([1.0, [["X", {b"\x00\xff": 1, 7: 2, None: [b"\x1b"]}]], None],
                                use_bin_type=True)),
        # [1.0, array32 claiming 2^32 - 1 events] in 15 bytes
        (b"kv@a", b"\x93\xcb" + bytes(8) + b"\xdd\xff\xff\xff\xff"),
        (b"kv@a", msgpack.packb([2.0, [["AllBlocksCleared"]], None])),
        # 20 maps, each the key of the next, around a '"': 80 bytes
        (b"kv@a", b"\x93\xcb" + bytes(8) + b"\x91\x92\xa1X" + b"\x81" * 20 + b'\xa1"'
         + b"\xc0" * 21),
    ]


@pytest.mark.parametrize("mode", ["json", "text"])
def test_events_output_is_safe(ctx, mode):
    xpub = ctx.socket(zmq.XPUB)
    port = xpub.bind_to_random_port("tcp://127.0.0.1")
    payloads = hostile_payloads()
    args = [KVPOOL, "events", "tcp://127.0.0.1:%d" % port, "--count", str(len(payloads)),
            "--timeout", "10"] + (["--json"] if mode == "json" else [])
    ev = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert xpub.poll(10000), "kvpool events never subscribed"
        xpub.recv()
        for seq, (topic, payload) in enumerate(payloads):
            xpub.send_multipart([topic, seq.to_bytes(8, "big"), payload])
        out, err = ev.communicate(timeout=20)
    finally:
        if ev.poll() is None:
            ev.kill()
    assert ev.returncode == 0, err
    assert b"batch 4 is not a msgpack batch" in err  # the 2^32 claim, refused
    no_control_chars(out)
    if mode == "text":
        assert out.count(b"batch ") == len(payloads) - 1
        return
    lines = [json.loads(x, parse_constant=reject_constant) for x in out.decode().splitlines()]
    assert [x["seq"] for x in lines] == [0, 1, 2, 3, 5, 6]
    assert lines[0]["ts"] is None and lines[1]["ts"] is None  # NaN, inf
    assert lines[1]["topic"] == "kv@\ufffd\x1b[0m"
    st = lines[1]["events"][0]
    assert st["medium"] == "GPU\x1b[2J" and st["lora_name"] == "\u009b31m\x07lora"
    assert lines[2]["events"][0]["medium"] == "\ufffd\ufffd\ufffdGPU"
    assert lines[3]["events"][0]["raw"][1] == {"00ff": 1, "7": 2, "null": ["1b"]}
    assert lines[4]["events"] == [{"type": "AllBlocksCleared"}]
    # a key that is a map is summarised: output stays linear in the input
    assert lines[5]["events"][0]["raw"][1] == {"map of 1": None}
    assert len(out.decode().splitlines()[5]) < 48 * len(payloads[6][1]) + 256


def test_events_refuses_oversized_frames(ctx):
    # the subscriber bounds what it accepts (default 16 MiB a frame): a
    # 64 MiB payload costs it nothing, and the next batches still arrive
    xpub = ctx.socket(zmq.XPUB)
    port = xpub.bind_to_random_port("tcp://127.0.0.1")
    ev = subprocess.Popen([KVPOOL, "events", "tcp://127.0.0.1:%d" % port, "--json",
                           "--count", "2", "--timeout", "20"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        assert xpub.poll(10000), "kvpool events never subscribed"
        xpub.recv()
        before = vm_hwm_kb(ev.pid)
        xpub.send_multipart([b"kv@a", (0).to_bytes(8, "big"), b"\x93" + b"\0" * (64 << 20)])
        good = msgpack.packb([1.0, [["AllBlocksCleared"]], None])
        seq, line = 1, None
        deadline = time.monotonic() + 15
        while line is None:  # until it has reconnected and printed one
            assert time.monotonic() < deadline, "no batch after the oversized one"
            xpub.send_multipart([b"kv@a", seq.to_bytes(8, "big"), good])
            seq += 1
            r, _, _ = select.select([ev.stdout], [], [], 0.1)
            if r:
                line = read_line(ev)
        grew = vm_hwm_kb(ev.pid) - before
        assert line["events"] == [{"type": "AllBlocksCleared"}]
        xpub.send_multipart([b"kv@a", seq.to_bytes(8, "big"), good])
        ev.wait(timeout=20)
    finally:
        if ev.poll() is None:
            ev.kill()
    err = ev.stderr.read().decode()
    assert ev.returncode == 0, err
    assert grew < 32 * 1024, "peak memory grew by %d kB" % grew
    # said precisely: our bound, not the publisher going away
    assert "a frame over --max-bytes (16777216) arrived" in err, err
    assert "went away" not in err and "end of stream" not in err, err


# ---- the subscriber CLI against the publisher CLI, as a user runs them --------

TRACE = os.path.join(ROOT, "data", "mooncake_fast25_conversation_trace.jsonl.gz")


def stop(proc):
    """Kill `proc` if it is still running, and reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def wait_for_stderr(proc, text, timeout=20.0):
    """Read proc's stderr until `text` appears (within `timeout`); returns
    what was read."""
    buf = b""
    deadline = time.monotonic() + timeout
    while text not in buf:
        left = deadline - time.monotonic()
        assert left > 0, "no %r on stderr within %.0fs (got %r)" % (text, timeout, buf)
        r, _, _ = select.select([proc.stderr], [], [], min(left, 0.2))
        if r:
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, "stderr closed before %r (got %r)" % (text, buf)
            buf += chunk
    return buf


def published_batches(err):
    """The batch count `kvpool replay --events` reports on stderr."""
    words = err.split(" batches on ")[0].split()
    return int(words[-1])


def fixed_loopback_port():
    """A free loopback port below the ephemeral range, as 5557 is: a client
    that keeps connecting to an ephemeral port nobody listens on may be given
    that very port as its own and connect to itself (TCP simultaneous open),
    and the server could no longer bind it."""
    import random
    import socket
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(100):
        port = random.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below %d" % low)


def run_both(tmp_path, sub_args, pub_args, timeout=120.0, on_pub_ready=None):
    """Start `kvpool events` (output into files, as a terminal takes it), then
    the publisher; wait (bounded) until the subscriber exits.  Fails at once
    when the publisher fails.  Returns (subscriber rc, its stdout, its stderr,
    the publisher process); both are stopped in any case."""
    out_f, err_f = open(tmp_path / "out", "wb"), open(tmp_path / "err", "wb")
    ev = subprocess.Popen([KVPOOL, "events", *sub_args], stdout=out_f, stderr=err_f)
    pub = subprocess.Popen([KVPOOL, *pub_args], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        if on_pub_ready:
            on_pub_ready(pub)
        deadline = time.monotonic() + timeout
        while ev.poll() is None:
            assert time.monotonic() < deadline, "kvpool events still running"
            assert pub.poll() in (None, 0, -9), pub.stderr.read()
            time.sleep(0.05)
    finally:
        stop(ev)
        stop(pub)
        out_f.close()
        err_f.close()
    return (ev.returncode, (tmp_path / "out").read_bytes(),
            (tmp_path / "err").read_text(), pub)


@pytest.mark.skipif(not os.path.exists(TRACE), reason="no conversation trace in data/")
def test_events_cli_receives_a_whole_replay(tmp_path):
    # README's example: `kvpool events EP --json` while `kvpool replay ...
    # --events EP` runs.  The subscriber ends by itself at the end of the
    # stream, having printed every batch in order, and says so plainly.
    ep = "tcp://127.0.0.1:%d" % fixed_loopback_port()
    rc, out, err, rep = run_both(tmp_path, [ep, "--json"],
                                 ["replay", TRACE, "--capacity", "2000", "--events", ep,
                                  "--events-wait", "10"])
    assert rep.wait(timeout=30) == 0
    rep_err = rep.stderr.read().decode()
    assert "(0 lost to a full queue)" in rep_err, rep_err
    n = published_batches(rep_err)
    assert n > 1000
    assert rc == 0, err
    assert "lost the connection" not in err and "went away" not in err, err
    assert "gap" not in err and "Assertion" not in err, err
    seqs = [json.loads(x)["seq"] for x in out.decode().splitlines()]
    assert seqs == list(range(n))
    assert "end of stream after batch %d (%d received, 0 lost)" % (n - 1, n) in err, err


def test_events_cli_reports_a_publisher_killed_mid_stream(tmp_path):
    # the demo has published every batch but not ended its stream when it is
    # killed: the subscriber gets every batch, then reports the stream lost
    # (no end-of-stream marker), not a normal end, and exits 1
    ep = "tcp://127.0.0.1:%d" % fixed_loopback_port()
    done = {}

    def kill_when_done(demo):
        read_line(demo, timeout=20)
        done.update(read_line(demo, timeout=20))
        time.sleep(0.5)  # lets the batches reach the subscriber first
        demo.kill()

    rc, out, err, _ = run_both(tmp_path, [ep, "--json", "--timeout", "3"],
                               ["events-demo", ep, "--events-wait", "10", "--hold", "60"],
                               on_pub_ready=kill_when_done)
    assert rc == 1, err
    assert ("went away without an end-of-stream marker after batch %d"
            % (done["batches"] - 1)) in err, err
    assert "end of stream after" not in err and "max-bytes" not in err, err
    assert "no message for 3 s" in err, err
    seqs = [json.loads(x)["seq"] for x in out.decode().splitlines()]
    assert seqs == list(range(done["batches"]))


def test_events_cli_reports_a_gap_at_the_end(ctx):
    # a publisher whose last batches never arrive, then the end-of-stream
    # marker (an empty batch numbered next): the gap at the end is reported
    xpub = ctx.socket(zmq.XPUB)
    port = xpub.bind_to_random_port("tcp://127.0.0.1")
    ev = subprocess.Popen([KVPOOL, "events", "tcp://127.0.0.1:%d" % port, "--json",
                           "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert xpub.poll(10000), "kvpool events never subscribed"
        xpub.recv()
        good = msgpack.packb([1.0, [["AllBlocksCleared"]], None])
        for seq in (0, 1):
            xpub.send_multipart([b"kv@a", seq.to_bytes(8, "big"), good])
        xpub.send_multipart([b"kv@a", (5).to_bytes(8, "big"), msgpack.packb([1.0, [], None])])
        out, err = ev.communicate(timeout=20)
    finally:
        stop(ev)
    err = err.decode()
    assert ev.returncode == 1, err
    assert "gap at the end: batches 2 to 4 never arrived" in err, err
    assert "end of stream after batch 4 (2 received, 3 lost)" in err, err
    assert [json.loads(x)["seq"] for x in out.decode().splitlines()] == [0, 1]


def test_publisher_ends_its_stream(ctx):
    # on the wire: after the last batch, an empty batch numbered next
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    proc = start_demo("tcp://127.0.0.1:%d" % port, "--connect", "--events-wait", "5")
    try:
        read_line(proc, socks=[sub])
        done = read_line(proc, socks=[sub])
        finish(proc)
        receive = [recv_frames(sub) for _ in range(done["batches"] + 1)]
    finally:
        stop(proc)
    assert [int.from_bytes(m[1], "big") for m in receive] == list(range(done["batches"] + 1))
    assert is_end_marker(receive[-1], done["batches"], TOPIC)
    assert not sub.poll(300)


@pytest.mark.parametrize("endpoint", ["localhost:5557", "tcp://127.0.0.1:0",
                                      "tcp://*:5557"])
def test_replay_refuses_a_bad_endpoint_as_bad_usage(tmp_path, endpoint):
    # exit 2 (bad command line), as `kvpool events` does, and nothing opened
    p = subprocess.run([KVPOOL, "replay", str(trace_file(tmp_path)), "--capacity", "8",
                        "--events", endpoint, "--events-connect"],
                       capture_output=True, timeout=30)
    e = subprocess.run([KVPOOL, "events", endpoint], capture_output=True, timeout=30)
    assert e.returncode == 2, e.stderr
    assert p.returncode == 2, p.stderr
    assert b"Try 'kvpool replay --help'" in p.stderr
    assert p.stdout == b""


def test_events_keeps_queued_batches_past_an_oversized_frame(ctx):
    # batches queued in the subscriber when its bound drops the connection
    # are printed all the same; the oversized batch is reported as a gap
    xpub = ctx.socket(zmq.XPUB)
    port = xpub.bind_to_random_port("tcp://127.0.0.1")
    ev = subprocess.Popen([KVPOOL, "events", "tcp://127.0.0.1:%d" % port, "--json",
                           "--max-bytes", "1000", "--count", "32", "--timeout", "20"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    good = msgpack.packb([1.0, [["AllBlocksCleared"]], None])
    try:
        assert xpub.poll(10000), "kvpool events never subscribed"
        xpub.recv()
        ev.send_signal(signal.SIGSTOP)  # everything below waits in its queue
        for seq in range(30):
            xpub.send_multipart([b"kv@a", seq.to_bytes(8, "big"), good])
        xpub.send_multipart([b"kv@a", (30).to_bytes(8, "big"), b"\x93" + bytes(5000)])
        time.sleep(0.5)  # lets the frames reach its socket
        ev.send_signal(signal.SIGCONT)
        lines = [read_line(ev, timeout=10) for _ in range(30)]
        seq, deadline = 31, time.monotonic() + 15
        while ev.poll() is None:  # until it has connected again and printed one
            assert time.monotonic() < deadline, "no batch after the oversized one"
            xpub.send_multipart([b"kv@a", seq.to_bytes(8, "big"), good])
            seq += 1
            try:
                ev.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        out, err = ev.communicate(timeout=10)
    finally:
        if ev.poll() is None:
            ev.send_signal(signal.SIGCONT)
        stop(ev)
    err = err.decode()
    assert [x["seq"] for x in lines] == list(range(30))
    after = [json.loads(x)["seq"] for x in out.decode().splitlines()]
    assert len(after) == 2 and after[0] > 30, err
    assert "a frame over --max-bytes (1000) arrived after batch 29" in err, err
    assert "gap: expected batch 30, got %d" % after[0] in err, err
    assert ev.returncode == 1, err
