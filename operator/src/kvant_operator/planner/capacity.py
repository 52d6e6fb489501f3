"""KV cache capacity, following SGLang's own arithmetic (docs/architecture.md, "Capacity planning").

SGLang measures the free memory at start (total), loads the weights, and sizes the KV pool as
    max_total_num_tokens = (free_after_weights - total x (1 - mem_fraction_static)) / cell
rounded down to the page size, where `cell` is the KV bytes one token takes on one GPU. With
free_after_weights = total - weights this is (total x mem_fraction_static - weights) / cell.
"""

from __future__ import annotations

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.planner.architecture import Attention, ModelShape

GIB = 1 << 30
MIB = 1 << 20
# CUDA context and NCCL buffers taken before SGLang measures "total"; about 1 GiB on H100/H200.
RUNTIME_RESERVE_BYTES = 1 * GIB
# SGLang's CPU engine process before any weights or KV: Python, torch, SGLang, the tokenizer and the
# activations of a prefill chunk. A tiny model's engine measured about 2.4 GB in all on SGLang 0.5.23's
# CPU backend; 3 GiB leaves room for the chunk's activations on larger models.
CPU_ENGINE_RESERVE_BYTES = 3 * GIB


def kv_dtype_bytes(dtype: KvCacheDtype, model_dtype_bytes: int) -> int:
    """auto follows the model's activation dtype, as SGLang does."""
    if dtype.is_fp8:
        return 1
    return 2 if dtype is KvCacheDtype.BF16 else model_dtype_bytes


def kv_bytes_per_token_per_gpu(shape: ModelShape, tp: int, dtype_bytes: int) -> int:
    if shape.attention is Attention.MLA:
        # One compressed latent plus the shared RoPE key per layer, replicated on every TP rank.
        return (shape.kv_lora_rank + shape.qk_rope_head_dim) * shape.num_layers * dtype_bytes
    # K and V per KV head; a rank holds at least one KV head (heads are replicated when tp > heads).
    return max(1, shape.num_kv_heads // tp) * 2 * shape.head_dim * shape.num_layers * dtype_bytes


def sglang_default_mem_fraction_static(gpu_memory_gib: float, tp: int) -> float:
    """SGLang's default --mem-fraction-static: GPU memory less a reserve for activations and CUDA graphs.

    The reserve (MiB) is 512 of metadata, 1.5 x the chunked-prefill size, 2 x the CUDA-graph batch
    size, 1024 per 8 TP ranks, and at least 10 GiB on GPUs over 60 GiB; both sizes follow the GPU's
    memory bucket. Without DP attention or speculative decoding, which Kvant does not plan.
    """
    gpu_mib = gpu_memory_gib * 1024
    chunked_prefill, graph_batch = _sglang_batch_defaults(gpu_mib, tp)
    reserve = 512 + max(chunked_prefill, 2048) * 1.5 + graph_batch * 2 + tp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    # A GPU smaller than SGLang's reserve gets 0: nothing fits, and the plan's warnings say so.
    return max(0.0, round((gpu_mib - reserve) / gpu_mib, 3))


def _sglang_batch_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a GPU of this size."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def kv_tokens_per_gpu(
    gpu_memory_bytes: int,
    weight_bytes_per_gpu: int,
    mem_fraction_static: float,
    cell_bytes: int,
    page_size: int,
) -> int:
    """SGLang's max_total_num_tokens for one TP group, rounded down to whole pages; 0 when nothing fits."""
    total = gpu_memory_bytes - RUNTIME_RESERVE_BYTES
    budget = total * mem_fraction_static - weight_bytes_per_gpu
    tokens = int(budget // cell_bytes) if budget > 0 else 0
    return tokens // page_size * page_size


def kv_tokens_on_cpu(
    memory_bytes: int, weight_bytes: int, cell_bytes: int, page_size: int, kv_cache_bytes: int | None
) -> int:
    """The KV tokens Kvant gives SGLang's CPU engine (`--max-total-tokens`, never SGLang's own default,
    which sizes KV from the host's RAM rather than the pod's): `kv_cache_bytes` when set, capped by what
    the container's memory leaves after the engine's own and the weights; whole pages; 0 when nothing fits.
    """
    room = memory_bytes - CPU_ENGINE_RESERVE_BYTES - weight_bytes
    budget = room if kv_cache_bytes is None else min(kv_cache_bytes, room)
    tokens = budget // cell_bytes if budget > 0 else 0
    return tokens // page_size * page_size


def max_concurrency(kv_tokens: int, context: int, page_size: int) -> int:
    """Requests that fit at once when each holds `context` tokens, in whole pages."""
    pages_per_request = -(-context // page_size)
    return kv_tokens // (pages_per_request * page_size)
