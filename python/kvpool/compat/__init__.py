# SPDX-License-Identifier: Apache-2.0
"""kvpool.compat — drop-in replacements for other systems' block managers.

Each module mirrors one original's public names, arguments and return types
so that code written for it moves with one import line:

- ``kvpool.compat.vllm``        vLLM v1 ``BlockPool`` / ``KVCacheBlock``
- ``kvpool.compat.veloxquant``  VeloxQuant-MLX ``BlockPoolAllocator``
- ``kvpool.compat.atom``        AMD ATOM ``BlockPool`` / ``BlockRetirement``
- ``kvpool.compat.vllm_mlx``    vllm-mlx ``PagedCacheManager``

Each module's ``install()`` switches the original system to its drop-in at
start-up (``kvpool.compat.vllm.install()``), and ``uninstall()`` restores it
(see ``_adopt``).  Deviations from the originals are listed in each module
docstring and in docs/PYTHON.md.
"""
