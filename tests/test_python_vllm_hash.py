# SPDX-License-Identifier: Apache-2.0
"""vLLM's engine-side block hashing in the drop-in (kvpool.compat.vllm.hash_block_tokens).

Under vLLM's default hash function (SHA-256 of the pickle at the highest
protocol) and no extra keys, the block hash is computed in C
(``_kvpool.vllm_block_hash``) from the tokens in place; it must be the value
vLLM's own ``hash_block_tokens`` gives, byte for byte, and anything the C code
does not pickle itself must go the Python way.  ``install()`` puts it where
vLLM's request block hasher looks it up.
"""
import hashlib
import os
import pickle
import random
import subprocess
import sys
import textwrap
import types

PYDIR = os.environ.get("KVP_PYTHON_DIR") or os.path.join(os.environ.get(
    "KVP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build")), "python")
sys.path.insert(0, PYDIR)

import pytest  # noqa: E402

from kvpool import _kvpool  # noqa: E402
from kvpool.compat import vllm  # noqa: E402


def sha256(obj):
    """vLLM's default hash function, restated."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def vllm_hash_block_tokens(hash_function, parent, tokens, extra_keys=None, none_hash=b"\0" * 32):
    """vLLM's hash_block_tokens, restated."""
    return hash_function((parent or none_hash, tuple(tokens), extra_keys))


def test_native_hash_is_vllms_sha256_of_the_pickle():
    rng = random.Random(3)
    for _ in range(2000):
        n = rng.choice([0, 1, 2, 3, 4, 16, 33, 300])
        toks = [rng.choice([rng.randrange(256), rng.randrange(256, 65536),
                            rng.randrange(-2 ** 31, 2 ** 31)]) for _ in range(n)]
        parent = bytes(rng.randrange(256) for _ in range(rng.choice([1, 32, 64, 255])))
        want = sha256((parent, tuple(toks), None))
        assert _kvpool.vllm_block_hash(parent, toks) == want
        assert _kvpool.vllm_block_hash(parent, tuple(toks)) == want


@pytest.mark.parametrize("parent, toks", [
    (b"", [1]), (b"x" * 256, [1]), (bytearray(b"x"), [1]), ("x", [1]), (None, [1]),
    (b"x", [2 ** 31]), (b"x", [-2 ** 31 - 1]), (b"x", [True]), (b"x", [1.0]), (b"x", "ab"),
    (b"x", range(3)), (b"x", [1, 2, 2 ** 40])])
def test_native_hash_leaves_what_it_does_not_pickle_to_python(parent, toks):
    assert _kvpool.vllm_block_hash(parent, toks) is None


def test_native_hash_refuses_a_wrong_argument_count():
    with pytest.raises(TypeError):
        _kvpool.vllm_block_hash(b"x")
    with pytest.raises(TypeError):
        _kvpool.vllm_block_hash(b"x", [1], None)


def test_hash_block_tokens_gives_vllms_values_on_every_path(monkeypatch):
    monkeypatch.setattr(vllm, "NONE_HASH", b"\7" * 32)
    parent = sha256(b"p")

    def other(obj):  # another hash function: the Python way
        return hashlib.sha1(repr(obj).encode()).digest()

    calls = []

    def counting(obj):  # vLLM's, as a new function object: recognised by its value
        calls.append(obj)
        return sha256(obj)

    for fn in (sha256, other, counting):
        for toks, extra in (([1, 2, 300], None), ([1, 2], ("lora", 3)), ((5,) * 16, None),
                            ([2 ** 40, 1], None), ([True, 2], None), ([], None)):
            want = vllm_hash_block_tokens(fn, parent, toks, extra)
            want_first = vllm_hash_block_tokens(fn, None, toks, extra, none_hash=b"\7" * 32)
            calls.clear()
            assert vllm.hash_block_tokens(fn, parent, toks, extra) == want
            assert vllm.hash_block_tokens(fn, None, toks, extra) == want_first
            if fn is counting:  # called only for what C does not pickle (the probe aside)
                python_way = extra is not None or any(type(t) is not int or abs(t) >= 2 ** 31
                                                      for t in toks)
                assert len([c for c in calls if c[0] != bytes(range(32))]) == 2 * python_way


def test_a_hash_function_that_fails_the_probe_is_called_as_vllm_calls_it():
    def broken(obj):
        raise RuntimeError("no")
    with pytest.raises(RuntimeError, match="no"):
        vllm.hash_block_tokens(broken, b"x" * 32, [1, 2])


def test_the_first_blocks_parent_is_vllms_none_hash_when_vllm_has_one(monkeypatch):
    utils = types.ModuleType("vllm.v1.core.kv_cache_utils")
    utils.NONE_HASH = b"\5" * 32
    monkeypatch.setitem(sys.modules, "vllm.v1.core.kv_cache_utils", utils)
    assert vllm.hash_block_tokens(sha256, None, [1, 2]) == sha256((b"\5" * 32, (1, 2), None))


def test_init_none_hash_follows_pythonhashseed(monkeypatch):
    monkeypatch.setattr(vllm, "NONE_HASH", None)
    monkeypatch.setenv("PYTHONHASHSEED", "42")
    vllm.init_none_hash(sha256)
    assert vllm.NONE_HASH == sha256("42")
    monkeypatch.delenv("PYTHONHASHSEED")
    vllm.init_none_hash(sha256)
    assert len(vllm.NONE_HASH) == 32 and vllm.NONE_HASH != sha256("42")


def test_install_puts_it_where_vllms_request_hasher_looks(tmp_path):
    core = tmp_path / "vllm" / "v1" / "core"
    core.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "v1", core):
        (d / "__init__.py").write_text("")
    (core / "block_pool.py").write_text("class BlockPool:\n    pass\n")
    (core / "kv_cache_utils.py").write_text(textwrap.dedent("""\
        NONE_HASH = b"\\1" * 32
        def hash_block_tokens(hash_function, parent, tokens, extra_keys=None):
            return ("own", parent, tuple(tokens), extra_keys)
        def request_hashes(fn, blocks):
            out, parent = [], None
            for b in blocks:
                parent = hash_block_tokens(fn, parent, b, None)
                out.append(parent)
            return out
        """))
    (core / "user.py").write_text("from vllm.v1.core.kv_cache_utils import hash_block_tokens\n")
    script = textwrap.dedent("""\
        import hashlib, pickle
        from kvpool.compat import vllm
        import vllm.v1.core.kv_cache_utils as utils, vllm.v1.core.user as user
        own = utils.hash_block_tokens
        def sha256(o):
            return hashlib.sha256(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)).digest()
        assert vllm.install() is True
        assert utils.hash_block_tokens is vllm.hash_block_tokens is user.hash_block_tokens
        h = utils.request_hashes(sha256, [[1, 2], [3, 4]])
        assert h[0] == sha256((b"\\1" * 32, (1, 2), None)) and h[1] == sha256((h[0], (3, 4), None))
        vllm.uninstall()
        assert utils.hash_block_tokens is own and user.hash_block_tokens is own
        print("ok")
        """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), PYDIR]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
