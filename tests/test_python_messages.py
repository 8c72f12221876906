# SPDX-License-Identifier: Apache-2.0
"""The binding's refusals name what is wrong: the argument and its range,
the option it cannot be combined with, the sequence that exists; and a
refused call changes nothing.  Run by scripts/run-tests with
PYTHONPATH=build/python (see docs/PYTHON.md)."""
import os
import re
import sys

PYDIR = os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python")
sys.path.insert(0, PYDIR)

import pytest  # noqa: E402

import kvpool  # noqa: E402


@pytest.mark.parametrize("value", [-1, 101, 1 << 40])
def test_protected_percent_range(value):
    with pytest.raises(kvpool.InvalidArgumentError,
                       match=rf"^protected_percent must be 0\.\.100, not {value}$"):
        kvpool.Pool(num_blocks=4, policy="slru", protected_percent=value)
    assert kvpool.Pool(num_blocks=4, policy="slru", protected_percent=100)
    assert kvpool.Pool(num_blocks=4, policy="slru", protected_percent=0)


@pytest.mark.parametrize("policy, reuse", [("slru", "fifo"),
                                           (kvpool.POLICY_SLRU, 2)])
def test_slru_refuses_fifo_reuse(policy, reuse):
    with pytest.raises(kvpool.InvalidArgumentError,
                       match=r"^policy 'slru' cannot be combined with reuse 'fifo'"):
        kvpool.Pool(num_blocks=4, policy=policy, reuse=reuse)
    assert kvpool.Pool(num_blocks=4, policy="slru", reuse="lowest")
    assert kvpool.Pool(num_blocks=4, policy="lru", reuse="fifo")


@pytest.mark.parametrize("value", [0, 65536, -1, 1 << 40])
def test_block_size_range(value):
    with pytest.raises(kvpool.InvalidArgumentError,
                       match=rf"^block_size must be 1\.\.65535, not {value}$"):
        kvpool.Pool(block_size=value, num_blocks=4)
    assert kvpool.Pool(block_size=65535, num_blocks=1).block_size == 65535


def test_range_arguments_must_be_integers():
    for name in ("block_size", "protected_percent"):
        with pytest.raises(TypeError, match=f"^{name} must be an integer"):
            kvpool.Pool(num_blocks=4, **{name: "16"})


def test_num_blocks_zero_is_a_pool_that_grows():
    # As the C library: a pool with no blocks yet, grown by extend (or by a
    # take with grow_on_exhaustion).
    p = kvpool.Pool(num_blocks=0)
    assert p.free_count() == 0
    with pytest.raises(kvpool.ExhaustedError):
        p.take()
    assert p.extend(2) == 2 and p.free_count() == 2
    p.take()
    g = kvpool.Pool(num_blocks=0, grow_on_exhaustion=True)
    g.take()
    assert g.stats()["in_use"] == 1
    with pytest.raises(kvpool.InvalidArgumentError,
                       match=r"^null_block needs num_blocks >= 1$"):
        kvpool.Pool(num_blocks=0, null_block=True)


def test_num_blocks_above_max_blocks():
    with pytest.raises(kvpool.InvalidArgumentError,
                       match=r"^num_blocks \(8\) is above max_blocks \(4\)$"):
        kvpool.Pool(num_blocks=8, max_blocks=4)


def test_second_sequence_names_the_request_id():
    p = kvpool.Pool(block_size=4, num_blocks=8)
    s = p.sequence(5)
    s.admit(list(range(6)))
    other = p.sequence(6)
    state = (p.fingerprint(), p.stats()["in_use"], s.blocks(), s.num_tokens)
    for make in (lambda: p.sequence(5), lambda: kvpool.Sequence(p, 5),
                 lambda: other.fork(5)):
        with pytest.raises(kvpool.OwnerActiveError, match=r"^sequence 5 exists$"):
            make()
        assert (p.fingerprint(), p.stats()["in_use"], s.blocks(), s.num_tokens) == state
        assert p.find_sequence(5) is s
    p.check()
