# SPDX-License-Identifier: Apache-2.0
"""Python code run from inside a binding call: a set member's __eq__, a
stored hash's __ne__, on_evict, an object's __del__ freed by a list store,
an argument's __index__, each changing what the call had checked (the
ATOM drop-in's lists shrunk, a list argument emptied, a dict argument
changed, the pool closed).  The call must refuse with a specific error or
finish correctly, never read what it checked before the code ran.  Each
case runs in a child process (test_python_hostile.run_child), so a crash
fails the test; the last test repeats random mutations over many calls.
Run by scripts/run-tests with PYTHONPATH=build/python (see docs/PYTHON.md)."""
import random
import textwrap

import pytest

from test_python_hostile import run_child

ATOM = """
from kvpool.compat import atom

def shrink(bp):
    bp._hash.clear(); bp._tokens.clear(); bp.blocks.clear()

class Key(int):
    '''A set member equal to the int of its value (same hash): its __eq__
    runs when the pool looks that id up in the set.'''
    action = None
    answer = True
    def __hash__(self):
        return int(self)
    def __eq__(self, other):
        if Key.action:
            Key.action()
        return Key.answer if isinstance(other, int) else NotImplemented

class Hash(bytes):
    '''A stored hash: its __ne__ runs when the block is published again.'''
    action = None
    __hash__ = bytes.__hash__
    def __ne__(self, other):
        if Hash.action:
            Hash.action()
        return True

class Masked(int):
    '''An int for publish() whose mask (h & 2**64-1) is a 32-byte Hash.'''
    def __and__(self, mask):
        return Hash(bytes(24) + (int(self) % 251 + 1).to_bytes(8, "big"))

def refused(fn, *args):
    try:
        fn(*args)
    except RuntimeError as e:
        assert "resized during the call" in str(e), e
        return True
    return False
"""


HOOK = """
class Hook:
    # An index that calls action() when read, then stands for value.
    def __init__(self, action, value):
        self.action, self.value = action, value
    def __index__(self):
        self.action()
        return self.value
"""


def atom_child(body, prelude=ATOM, **kw):
    """run_child of a prelude (ATOM's helpers by default) and then body."""
    return run_child(prelude + textwrap.dedent(body), **kw)


@pytest.mark.parametrize("action", ["shrink", "close"])
def test_atom_publish_stored_hash_ne(action):
    # The public path: publish() with an int subclass whose __and__ gives a
    # bytes subclass stores that object as the hash; its __ne__ runs at the
    # next publish of the block and empties the lists or closes the pool.
    out = atom_child(f"""
        bp = atom.BlockPool(4)
        Hash.action = lambda: shrink(bp) if "{action}" == "shrink" else bp._pool.close()
        bp.allocate(0)
        bp.publish(0, Masked(5), [1])
        assert isinstance(bp._hash[0], Hash)
        stored = bytes(bp._hash[0])
        try:
            bp.publish(0, 7, [2])
        except (RuntimeError, kvpool.InvalidArgumentError) as e:
            print(type(e).__name__, e)
        if not bp._pool.closed:   # refused before the pool changed
            assert bp._pool.lookup(stored) == 0 and bp._pool.lookup(7, 0, None) is None
    """)
    assert out.startswith("RuntimeError" if action == "shrink" else "InvalidArgumentError"), out
    assert ("resized during the call" if action == "shrink" else "the pool is closed") in out


def test_atom_on_evict_empties_lists():
    # on_evict (a constructor argument) runs inside allocate, which then
    # returns the block object.
    out = atom_child("""
        holder = []
        bp = atom.BlockPool(2, on_evict=lambda h: shrink(holder[0]))
        holder.append(bp)
        bp.allocate(0); bp.publish(0, 5, [1]); bp.free(0)
        assert refused(bp.allocate, 0)
        assert bp.blocks_evicted == 1
        print("allocate refused")
    """)
    assert "allocate refused" in out


def test_atom_tokens_del_empties_lists():
    # The token list a block held is released when its slot is cleared;
    # the __del__ of what it holds runs there.
    out = atom_child("""
        bp = atom.BlockPool(2)
        class Tok:
            def __del__(self):
                shrink(bp)
        bp.allocate(0); bp.publish(0, 5, [Tok()]); bp.free(0)
        assert refused(bp.allocate, 0)
        print("allocate refused")
        bp = atom.BlockPool(2)
        bp.allocate(0); bp.publish(0, 5, [Tok()])
        bp.publish(0, 6, [1])           # the old tokens go last: nothing read after
        print("republish ok", bp._hash == [])
    """)
    assert "allocate refused" in out and "republish ok True" in out


@pytest.mark.parametrize("method", ["allocate", "claim"])
def test_atom_popped_member_eq_empties_lists(method):
    # A popped id's completion (allocate / claim) looks the id up in
    # _popped: a member's __eq__ empties the lists first.
    out = atom_child(f"""
        bp = atom.BlockPool(4)
        bp._popped.add(Key(0))
        Key.action = lambda: shrink(bp)
        assert refused(bp.{method}, 0)
        print("popped refused")
        # not popped (the member answers False): the take, then the lists
        bp = atom.BlockPool(4)
        bp.allocate(0); bp.publish(0, 5, [1]); bp.free(0)
        bp._popped.add(Key(0))
        Key.answer = False
        Key.action = lambda: shrink(bp)
        assert refused(bp.{method}, 0)
        print("taken refused")
    """)
    assert "popped refused" in out and "taken refused" in out


def test_atom_stale_member_eq_empties_lists():
    out = atom_child("""
        bp = atom.BlockPool(4)
        bp.allocate(0); bp.publish(0, 5, [1]); bp.free(0)
        bp._stale.add(Key(0))
        Key.answer = False
        Key.action = lambda: shrink(bp)
        assert refused(bp.allocate, 0)
        print("stale refused")
    """)
    assert "stale refused" in out


def test_atom_sets_replaced_during_lookup():
    # A member's __eq__ replaces the set (or dict) being searched: the call
    # finishes on the object it started with.
    out = atom_child("""
        import gc
        for name in ("_popped", "_stale", "_raw_unit_owner"):
            bp = atom.BlockPool(4)
            bp.allocate(0); bp.publish(0, 5, [1]); bp.free(0)
            if name == "_raw_unit_owner":
                bp._raw_unit_owner[Key(1)] = None
                bp.allocate(1)
                def act(bp=bp):
                    bp._raw_unit_owner = {}
                    gc.collect()
                Key.answer, Key.action = False, act
                bp.free(1)
            else:
                getattr(bp, name).add(Key(0))
                def act(bp=bp, name=name):
                    setattr(bp, name, set())
                    gc.collect()
                Key.answer, Key.action = False, act
                bp.allocate(0)
            Key.action = None
            print(name, "ok", bp._pool.check() is None)
    """)
    assert out.count(" ok") == 3


def test_block_bytes_list_emptied_by_index():
    out = atom_child("""
        sizes = []
        sizes.extend([Hook(sizes.clear, 64), 128])
        p = kvpool.Pool(block_size=4, num_blocks=2, block_bytes=sizes, host_arena=True,
                        separate_kv=True)
        print("created", p.block_size)
    """, HOOK)
    assert "created 4" in out


def test_extra_mm_list_emptied_by_index():
    out = atom_child("""
        p = kvpool.Pool(block_size=4, num_blocks=4)
        spans = []
        spans.extend([(H(1), Hook(spans.clear, 0), 4), (H(2), 4, 8)])
        got = p.hash_tokens(list(range(8)), extra={"mm": spans})
        want = p.hash_tokens(list(range(8)), extra={"mm": [(H(1), 0, 4), (H(2), 4, 8)]})
        print("same", got == want)
    """, HOOK)
    assert "same True" in out


def test_extra_lora_name_replaced_by_index():
    # lora_id's __index__ drops the dict's lora_name and makes strings of
    # its size: the sequence's events carry the name the dict held.
    out = run_child("""
        p = kvpool.Pool(block_size=4, num_blocks=4, events=True)
        n = 200
        keep = []
        class Lora:
            def __index__(self):
                extra["lora_name"] = None
                keep.extend(["adapter-" + "y" * n for _ in range(8)])
                return 3
        extra = {"lora_name": "adapter-" + "x" * n, "lora_id": Lora()}
        s = kvpool.Sequence(p, 1, extra=extra)
        s.admit(list(range(8)))
        (event, *_), dropped = p.events_take()
        print("name", event[5] == "adapter-" + "x" * n)
    """)
    assert "name True" in out


def test_vllm_argument_lists_emptied_during_the_call():
    # get_cached_block's group ids and touch's groups, emptied or consumed
    # by Python code the call runs: the call reads what it was given.
    out = atom_child("""
        from kvpool.compat import vllm
        bp = vllm.BlockPool(8, True)
        b = bp.get_new_blocks(2)
        bp._cache_blocks(b, [b"a" * 8, b"b" * 8], 0)
        gids = []
        gids.extend([Hook(gids.clear, 0), 0])
        got = bp.get_cached_block(b"a" * 8, gids)
        print("cached", [x.block_id for x in got] == [b[0].block_id] * 2)
        outer = []
        def group():
            outer.clear()
            yield b[0]
        outer.extend([group(), [b[1]]])
        bp.touch(outer)
        print("touched", [x.ref_cnt for x in b])
        bp.touch([(x for x in b)])       # a generator group: touched once, in full
        print("touched", [x.ref_cnt for x in b])
    """, HOOK)
    assert "cached True" in out and "touched [2, 2]" in out and "touched [3, 3]" in out


def test_pool_closed_during_conversion():
    # An argument's __index__ closes the pool: each call reports the
    # closed pool, not an unrelated error.
    out = atom_child("""
        from kvpool.compat import vllm
        def closed(fn):
            try:
                fn()
            except kvpool.InvalidArgumentError as e:
                return "closed" in str(e) or str(e)
            return "no error"
        p = kvpool.Pool(block_size=4, num_blocks=4)
        print("Sequence", closed(lambda: kvpool.Sequence(p, Hook(p.close, 1))))
        p = kvpool.Pool(block_size=4, num_blocks=4)
        print("sequence", closed(lambda: p.sequence(Hook(p.close, 1))))
        bp = vllm.BlockPool(8, True)
        print("evict", closed(lambda: bp._evict_block_ids([Hook(bp.pool.close, 1)])))
        bp = vllm.BlockPool(8, True)
        print("cached", closed(lambda: bp.get_cached_block(b"x" * 8, [Hook(bp.pool.close, 0)])))
        bp = vllm.BlockPool(8, True)
        b = bp.get_new_blocks(1)
        print("cache", closed(lambda: bp._cache_blocks(b, [b"x" * 8], Hook(bp.pool.close, 0))))
        bp = vllm.BlockPool(8, True)
        b = bp.get_new_blocks(1)
        def groups():
            bp.pool.close()
            yield b
        print("touch", closed(lambda: bp.touch(groups())))
    """, HOOK)
    assert out.split("\n")[:-1] == [f"{n} True" for n in (
        "Sequence", "sequence", "evict", "cached", "cache", "touch")], out


def test_random_reentry_fuzz():
    # Many random calls on an ATOM pool whose hooks (on_evict, stored
    # hashes' __ne__, token objects' __del__, set members' __eq__) mutate
    # the lists, sets and pool at random: every call returns or raises an
    # ordinary exception, and the native pool stays consistent.
    seed = random.randrange(1 << 30)
    out = atom_child(f"""
        import random
        rng = random.Random({seed})
        holder = []
        def mutate():
            bp = holder[0]
            r = rng.random()
            if r < 0.2:
                shrink(bp)
            elif r < 0.3:
                del bp._hash[rng.randrange(len(bp._hash) + 1):]
            elif r < 0.4:
                bp._popped = set(); bp._stale = set()
            elif r < 0.45:
                bp._raw_unit_owner = {{}}
            elif r < 0.5:
                bp._tokens[:] = bp._tokens[: len(bp._tokens) // 2]
        Hash.action = lambda: rng.random() < 0.5 and mutate()
        class Tok:
            def __del__(self):
                if rng.random() < 0.3:
                    mutate()
        Key.action = lambda: rng.random() < 0.5 and mutate()
        errors = {{}}
        for round in range(300):
            n = rng.randrange(1, 9)
            bp = atom.BlockPool(n, max_blocks=n + 2,
                                on_evict=lambda h: rng.random() < 0.3 and mutate())
            holder[:] = [bp]
            for step in range(40):
                Key.answer = rng.random() < 0.5
                i = rng.randrange(n + 1)
                op = rng.randrange(9)
                try:
                    if op == 0:
                        bp.allocate(i)
                    elif op == 1:
                        bp.pop()
                    elif op == 2:
                        bp.claim(i)
                    elif op == 3:
                        bp.free(i)
                    elif op == 4:
                        h = Masked(rng.randrange(1 << 20)) if rng.random() < 0.5 else rng.randrange(99)
                        bp.publish(i, h, [Tok(), rng.random()])
                    elif op == 5:
                        bp.lookup(rng.randrange(99))
                    elif op == 6:
                        rng.choice((bp._popped, bp._stale)).add(Key(i))
                    elif op == 7:
                        bp._raw_unit_owner[Key(i)] = ("x", 0)
                    else:
                        bp.clear_index()
                except Exception as e:  # ordinary refusals; a crash kills the child
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                if bp._pool.closed:
                    break
            bp._pool.check()
        print("rounds done", sorted(errors))
    """, timeout=120)
    assert "rounds done" in out, f"seed {seed}"


def test_pool_methods_closed_during_conversion():
    # Pool's methods whose arguments run Python code (an owner's or a
    # stream's __index__, a generator of ids or tokens) that closes the pool.
    out = atom_child("""
        def ids(p, *v):
            p.close()
            yield from v
        calls = {
            "alloc": lambda p: p.alloc(4, owner=Hook(p.close, 1)),
            "take": lambda p: p.take(owner=Hook(p.close, 1)),
            "free": lambda p: p.free(ids(p, 0)),
            "free_one_owner": lambda p: p.free(0, owner=Hook(p.close, 1)),
            "owner_blocks": lambda p: p.owner_blocks(Hook(p.close, 1)),
            "lookup_many": lambda p: p.lookup_many(H(0), stream=Hook(p.close, 0)),
            "claim_many": lambda p: p.claim_many(ids(p, 0)),
            "publish_many": lambda p: p.publish_many(ids(p, 0), H(0)),
            "unpublish_many": lambda p: p.unpublish_many(ids(p, 0)),
            "set_fill_many": lambda p: p.set_fill_many([0], ids(p, 1)),
            "publish_verified": lambda p: p.publish_verified(0, H(0), None, ids(p, 1, 2, 3, 4)),
            "lookup_verified": lambda p: p.lookup_verified(H(0), None, ids(p, 1, 2, 3, 4)),
        }
        for name, call in calls.items():
            p = kvpool.Pool(block_size=4, num_blocks=4, verify_hits=True)
            p.take()
            try:
                call(p)
                print(name, "no error")
            except kvpool.InvalidArgumentError as e:
                print(name, str(e) == "the pool is closed" or str(e))
    """, HOOK)
    assert [line.split(" ", 1)[1] for line in out.splitlines()] == ["True"] * 12, out
