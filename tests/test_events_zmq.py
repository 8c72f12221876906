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
    assert not sub.poll(200), "more messages than the demo says it sent"
    return out


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
