# SPDX-License-Identifier: Apache-2.0
"""Hypothesis stateful test: native kvpool.Pool and kvpool.Sequence against a
pure-Python reference model of one FIFO free queue (vLLM's order: never-used
blocks first in id order, then blocks in the order they were freed), owner
references, a content index with duplicates, and sequences that admit a
prompt (longest cached prefix, at least one token left to compute) and free
tail first.  Every refused call must leave the fingerprint unchanged."""
import os
import sys

sys.path.insert(0, os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python"))

from hypothesis import settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, precondition  # noqa: E402

import kvpool  # noqa: E402

N = 12
BS = 2
# Sequence references are their own kind in the library (block "seq_refs"):
# free(..., owner=None) can drop only anonymous ones.  The model keeps them
# apart the same way.
SEQ = "seq"


def H(i):
    return bytes(24) + (i + 1).to_bytes(8, "big")


class Model:
    def __init__(self):
        self.queue = list(range(N))      # free blocks, next reused first
        self.refs = {}                   # block -> list of owners (None = anon), oldest first
        self.hash = {}                   # block -> hash (indexed)
        self.index = {}                  # hash -> [blocks in publish order]

    def unindex(self, b):
        h = self.hash.pop(b, None)
        if h is not None:
            self.index[h].remove(b)
            if not self.index[h]:
                del self.index[h]

    def take(self, n):
        got, self.queue = self.queue[:n], self.queue[n:]
        for b in got:
            self.unindex(b)
        return got

    def drop(self, b, owner):
        self.refs[b].remove(owner)
        if not self.refs[b]:
            del self.refs[b]
            self.queue.append(b)

    def lookup(self, h):
        lst = self.index.get(h)
        return lst[0] if lst else None


class PoolMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.p = kvpool.Pool(block_size=BS, num_blocks=N, reuse="fifo")
        self.m = Model()
        self.seqs = {}    # rid -> (Sequence, model block list)
        self.next_rid = 1000

    def refused(self, exc, fn):
        fp = self.p.fingerprint()
        try:
            fn()
        except exc:
            pass
        else:
            raise AssertionError(f"expected {exc.__name__}")
        assert self.p.fingerprint() == fp

    @rule(n=st.integers(1, 5), owner=st.sampled_from([None, 1, 2, 3]))
    def alloc(self, n, owner):
        if n > len(self.m.queue):
            self.refused(kvpool.ExhaustedError, lambda: self.p.alloc_blocks(n, owner))
            return
        ids = self.p.alloc_blocks(n, owner)
        assert ids == self.m.take(n)
        for b in ids:
            self.m.refs[b] = [owner]

    @rule(owner=st.sampled_from([None, 1, 2, 3]), data=st.data())
    def free_some(self, owner, data):
        held = [b for b, os_ in self.m.refs.items() if owner in os_]
        if not held:
            return
        ids = data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=3, unique=True))
        self.p.free(ids, owner)
        for b in ids:
            self.m.drop(b, owner)

    @rule(owner=st.sampled_from([1, 2, 3]))
    def free_owner(self, owner):
        held = [(b, i) for b, os_ in self.m.refs.items() for i, o in enumerate(os_) if o == owner]
        if not held:
            self.refused(kvpool.NotFoundError, lambda: self.p.free_owner(owner))
            return
        order = self.p.owner_blocks(owner)[::-1]   # newest first
        assert self.p.free_owner(owner) == len(order)
        for b in order:
            self.m.drop(b, owner)

    @rule(b=st.integers(0, N - 1), owner=st.sampled_from([None, 1]))
    def bad_free(self, b, owner):
        if b not in self.m.refs:
            self.refused(kvpool.DoubleFreeError, lambda: self.p.free([b], owner))
        elif owner not in self.m.refs[b] and not (owner is None and SEQ in self.m.refs[b]):
            self.refused(kvpool.NotOwnerError, lambda: self.p.free([b], owner))

    @rule(data=st.data(), h=st.integers(0, 5))
    def publish(self, data, h):
        used = sorted(self.m.refs)
        if not used:
            return
        b = data.draw(st.sampled_from(used))
        cur = self.m.hash.get(b)
        if cur is not None and cur != H(h):
            self.refused(kvpool.BusyError, lambda: self.p.publish(b, H(h)))
            return
        self.p.publish(b, H(h))
        if cur is None:
            self.m.hash[b] = H(h)
            self.m.index.setdefault(H(h), []).append(b)

    @rule(h=st.integers(0, 5), owner=st.sampled_from([None, 2]))
    def lookup_claim(self, h, owner):
        want = self.m.lookup(H(h))
        if want is None:
            self.refused(kvpool.NotFoundError, lambda: self.p.lookup(H(h)))
            return
        assert self.p.lookup(H(h)) == want
        self.p.claim(want, owner)
        if want in self.m.refs:
            self.m.refs[want].append(owner)
        else:
            self.m.queue.remove(want)
            self.m.refs[want] = [owner]

    @rule(n=st.integers(0, 3))
    def evict(self, n):
        cached = [b for b in self.m.queue if b in self.m.hash][:n]
        assert self.p.evict(n) == len(cached)
        for b in cached:
            self.m.unindex(b)

    @rule()
    def reset(self):
        if self.m.refs:
            self.refused(kvpool.BusyError, self.p.reset_prefix_cache)
        else:
            self.p.reset_prefix_cache()
            self.m.hash.clear()
            self.m.index.clear()

    @rule(prompt=st.lists(st.integers(0, 2), min_size=1, max_size=7))
    def seq_admit(self, prompt):
        rid = self.next_rid
        self.next_rid += 1
        hashes = self.p.hash_tokens(prompt)
        full = len(prompt) // BS
        cap = (len(prompt) - 1) // BS
        hits = []
        for i in range(cap):
            b = self.m.lookup(hashes[32 * i:32 * i + 32])
            if b is None:
                break
            hits.append(b)
        need = (len(prompt) + BS - 1) // BS - len(hits)
        s = kvpool.Sequence(self.p, rid)
        free_after_claims = len(self.m.queue) - sum(1 for b in hits if b not in self.m.refs)
        if need > free_after_claims:
            self.refused(kvpool.ExhaustedError, lambda: s.admit(prompt))
            s.destroy()
            return
        assert s.admit(prompt) == len(hits) * BS
        for b in hits:
            if b in self.m.refs:
                self.m.refs[b].append(SEQ)
            else:
                self.m.queue.remove(b)
                self.m.refs[b] = [SEQ]
        new = self.m.take(need)
        for b in new:
            self.m.refs[b] = [SEQ]
        table = hits + new
        for i in range(len(hits), full):
            h = hashes[32 * i:32 * i + 32]
            self.m.hash[table[i]] = h
            self.m.index.setdefault(h, []).append(table[i])
        assert s.blocks() == table
        with s.block_table as mv:
            assert list(mv) == table
        self.seqs[rid] = (s, table)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def seq_destroy(self, data):
        rid = data.draw(st.sampled_from(sorted(self.seqs)))
        s, table = self.seqs.pop(rid)
        s.destroy()
        for b in reversed(table):
            self.m.drop(b, SEQ)

    @invariant()
    def agrees(self):
        s = self.p.stats()
        assert s["free"] == len(self.m.queue)
        assert s["in_use"] == len(self.m.refs)
        assert s["indexed"] == len(self.m.hash)
        for b in range(N):
            info = self.p.block_info(b)
            assert info["ref_count"] == len(self.m.refs.get(b, ()))
            assert info["published"] == (b in self.m.hash)

    def teardown(self):
        self.p.check()


PoolMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPoolModel = PoolMachine.TestCase
