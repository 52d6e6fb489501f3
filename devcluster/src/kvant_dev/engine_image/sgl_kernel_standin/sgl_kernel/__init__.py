"""STAND-IN for ``sgl_kernel``: Kvant's local cluster only, never in a product image.

SGLang on CPU (``SGLANG_USE_CPU_ENGINE=1``) calls two bookkeeping ops from ``sgl_kernel`` on any
x86 CPU, AMX or not: ``from sgl_kernel import assign_req_to_token_pool_cpu``
(sglang/srt/mem_cache/allocation.py) and ``from sgl_kernel import copy_all_layer_kv_cache_cpu``
(sglang/kernels/ops/kvcache/cache_move.py). No CPU build of sgl-kernel is on PyPI, so the local
cluster's engine environment (hack/engine-image.sh) installs this package instead. It implements
exactly those two ops in plain torch, with the semantics of sgl-kernel's C++ CPU ops.

SGLang 0.5.23 also imports six speculative-decoding ops at module load on CPU (see
``IMPORTED_NOT_IMPLEMENTED``); they import, and calling one raises NotImplementedError naming it.
Any other name raises AttributeError naming it, so ``from sgl_kernel import X`` fails as
ImportError and ``hasattr`` is False: nothing silently runs a missing kernel. It is a stand-in: real
engine images use the real sgl-kernel, and this package is never installed in a product image.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import NoReturn

import torch

__all__ = ["assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu"]

_STANDIN = (
    "this sgl_kernel is Kvant's local-cluster STAND-IN (hack/engine-image.sh); it provides only "
    + ", ".join(__all__)
)


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise RuntimeError(f"sgl_kernel stand-in: {what}")


def _check_cpu(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        _check(t.device.type == "cpu" and t.is_contiguous(), f"{name} must be a contiguous CPU tensor")


def assign_req_to_token_pool_cpu(  # noqa: PLR0917 - the positional signature SGLang calls
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Scatter freshly allocated KV slots into the request-to-token map, in place.

    For request i, ``req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]]`` takes the
    next ``end_offset[i] - start_offset[i]`` entries of ``out_cache_loc`` (requests consume it in
    order). ``req_to_token`` is int32 ``[max_reqs, pool_len]``; ``out_cache_loc`` is int64.
    """
    _check_cpu(
        req_pool_indices=req_pool_indices,
        req_to_token=req_to_token,
        start_offset=start_offset,
        end_offset=end_offset,
        out_cache_loc=out_cache_loc,
    )
    _check(req_to_token.dim() == 2 and req_to_token.dtype == torch.int32, "req_to_token must be 2-D int32")
    _check(req_to_token.size(1) == pool_len, "req_to_token.size(1) must equal pool_len")
    _check(out_cache_loc.dtype == torch.int64, "out_cache_loc must be int64")
    _check(start_offset.dtype == end_offset.dtype, "start_offset and end_offset must share a dtype")
    bs = req_pool_indices.size(0)
    _check(start_offset.numel() == bs and end_offset.numel() == bs, "offsets must have one entry per request")
    if bs == 0:
        return
    starts = start_offset.to(torch.int64)
    lens = end_offset.to(torch.int64) - starts
    _check(bool((lens >= 0).all()), "end_offset must not be below start_offset")
    total = int(lens.sum())
    _check(out_cache_loc.numel() >= total, "out_cache_loc is shorter than the slots to assign")
    if total == 0:
        return
    rows = torch.repeat_interleave(req_pool_indices.to(torch.int64), lens)
    seg_begin = torch.cumsum(lens, 0) - lens  # where request i's slots start in out_cache_loc
    cols = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(seg_begin - starts, lens)
    req_to_token[rows, cols] = out_cache_loc[:total].to(torch.int32)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Copy KV slot rows ``src_loc`` to ``tgt_loc`` in every buffer, in place.

    ``data_ptrs`` (uint64) holds the base address of each contiguous K/V buffer and ``strides``
    (int64) its bytes per slot row: ``buf[tgt_loc[i], :] = buf[src_loc[i], :]``. All source rows of
    a buffer are read before any target row is written, so overlapping locations are safe.
    """
    _check_cpu(data_ptrs=data_ptrs, strides=strides, tgt_loc=tgt_loc, src_loc=src_loc)
    _check(data_ptrs.dtype == torch.uint64, "data_ptrs must be uint64")
    _check(strides.dtype == torch.int64, "strides must be int64")
    _check(tgt_loc.dtype == src_loc.dtype, "tgt_loc and src_loc must share a dtype")
    _check(strides.numel() == data_ptrs.numel(), "strides must have one entry per buffer")
    _check(src_loc.numel() == tgt_loc.numel(), "tgt_loc and src_loc must have the same length")
    if data_ptrs.numel() == 0 or tgt_loc.numel() == 0:
        return
    tgt, src = tgt_loc.to(torch.int64), src_loc.to(torch.int64)
    _check(bool((tgt >= 0).all()) and bool((src >= 0).all()), "slot locations must be non-negative")
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(ptr)
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buf[tgt] = buf[src]  # gather (a copy) then scatter


# Imported at module load by sglang 0.5.23 on CPU (speculative decoding only, never on Kvant's path):
# kernels/ops/speculative/spec_tree.py, cache_locs.py and eagle.py.
IMPORTED_NOT_IMPLEMENTED = frozenset(
    {
        "assign_draft_cache_locs_contiguous_cpu",
        "assign_extend_cache_locs_cpu",
        "build_tree_kernel_efficient_cpu",
        "fill_accept_out_cache_loc_cpu",
        "fill_bonus_tokens_cpu",
        "verify_tree_greedy_cpu",
    }
)


def _not_implemented(name: str) -> Callable[..., NoReturn]:
    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        raise NotImplementedError(f"sgl_kernel.{name} is not implemented: {_STANDIN}")

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def __getattr__(name: str) -> object:
    if name in IMPORTED_NOT_IMPLEMENTED:
        return _not_implemented(name)
    raise AttributeError(f"sgl_kernel.{name} is not available: {_STANDIN}")
