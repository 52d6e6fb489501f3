"""The local cluster's sgl_kernel stand-in (engine image only) matches a plain-loop reference for its two
CPU bookkeeping ops, on the shapes SGLang feeds them, and refuses every other op by name (the six that
SGLang imports at load import, but refuse to run).

It is loaded from its file, so the test needs only torch, not the engine environment."""

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

STANDIN = (
    Path(__file__).resolve().parents[2]
    / "devcluster/src/kvant_dev/engine_image/sgl_kernel_standin/sgl_kernel/__init__.py"
)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kvant_sgl_kernel_standin", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sk = _load()


def _assign_reference(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc):
    pt = 0
    for i in range(len(req_pool_indices)):
        start, end = int(start_offset[i]), int(end_offset[i])
        for j in range(start, end):
            req_to_token[int(req_pool_indices[i]), j] = int(out_cache_loc[pt])
            pt += 1


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("offset_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("seed", range(4))
def test_assign_req_to_token_pool_matches_the_loop(index_dtype, offset_dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    max_reqs, pool_len, bs = 9, 40, 5
    req_to_token = torch.randint(0, 1000, (max_reqs, pool_len), dtype=torch.int32, generator=gen)
    req_pool_indices = torch.randperm(max_reqs, generator=gen)[:bs].to(index_dtype)
    # prefix offsets (cached prefix already mapped), a decode step of one token, and an empty extend
    start = torch.tensor([0, 7, 13, 25, 3], dtype=offset_dtype)
    end = torch.tensor([11, 8, 31, 25, 19], dtype=offset_dtype)
    total = int((end - start).sum())
    out_cache_loc = torch.randperm(4096, generator=gen)[
        : total + 6
    ]  # longer than needed: only the head counts
    expected = req_to_token.clone()
    _assign_reference(req_pool_indices, expected, start, end, out_cache_loc)

    sk.assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start, end, out_cache_loc, pool_len)

    assert torch.equal(req_to_token, expected)


def test_assign_with_no_requests_or_no_tokens_is_a_no_op():
    req_to_token = torch.arange(12, dtype=torch.int32).view(3, 4)
    before = req_to_token.clone()
    empty = torch.empty(0, dtype=torch.int64)
    sk.assign_req_to_token_pool_cpu(empty, req_to_token, empty, empty, empty, 4)
    same = torch.tensor([1, 2])
    sk.assign_req_to_token_pool_cpu(same, req_to_token, same, same, empty, 4)
    assert torch.equal(req_to_token, before)


def test_assign_checks_dtypes_like_the_real_op():
    one = torch.tensor([0])
    with pytest.raises(RuntimeError, match="int32"):
        sk.assign_req_to_token_pool_cpu(one, torch.zeros(2, 4, dtype=torch.int64), one, one + 1, one, 4)
    with pytest.raises(RuntimeError, match="pool_len"):
        sk.assign_req_to_token_pool_cpu(one, torch.zeros(2, 4, dtype=torch.int32), one, one + 1, one, 5)
    with pytest.raises(RuntimeError, match="shorter"):
        sk.assign_req_to_token_pool_cpu(one, torch.zeros(2, 4, dtype=torch.int32), one, one + 3, one, 4)


def _kv_buffers(rows, gen):
    """Per-layer K and V buffers of mixed row widths and dtypes, as a KV pool holds them."""
    return [
        torch.randn(rows, 2, 8, generator=gen).to(torch.bfloat16),  # layer 0 K
        torch.randn(rows, 2, 8, generator=gen).to(torch.bfloat16),  # layer 0 V
        torch.randn(rows, 4, 3, generator=gen),  # float32, odd width
        torch.randint(0, 256, (rows, 16), dtype=torch.uint8, generator=gen),  # fp8 stored as bytes
    ]


def _pointers(buffers):
    data_ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in buffers])
    return data_ptrs, strides


@pytest.mark.parametrize("loc_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("seed", range(4))
def test_copy_all_layer_kv_cache_matches_gather_then_scatter(loc_dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    rows, n = 64, 20
    buffers = _kv_buffers(rows, gen)
    perm = torch.randperm(rows, generator=gen)
    tgt = perm[:n].to(loc_dtype)
    src = perm[n // 2 : n // 2 + n].to(loc_dtype)  # overlaps tgt: moves chain through each other
    snapshots = [b.clone() for b in buffers]
    expected = [b.clone() for b in buffers]
    for exp, snap in zip(expected, snapshots, strict=True):
        for i in range(n):
            exp[int(tgt[i])] = snap[int(src[i])]
    data_ptrs, strides = _pointers(buffers)

    sk.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt, src)

    assert buffers, "no KV buffers to compare"
    for got, exp in zip(buffers, expected, strict=True):
        assert torch.equal(got.view(torch.uint8), exp.view(torch.uint8))


def test_copy_of_sliced_locations_touches_only_those_rows():
    """SGLang passes `tgt_loc[:num_locs]` of a longer, padded location tensor; a swap stays a swap."""
    gen = torch.Generator().manual_seed(7)
    buffers = _kv_buffers(16, gen)
    before = [b.clone() for b in buffers]
    tgt = torch.tensor([3, 5, 0, 0])
    src = torch.tensor([5, 3, 0, 0])
    data_ptrs, strides = _pointers(buffers)
    sk.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt[:2], src[:2])
    assert buffers, "no KV buffers to compare"
    for got, old in zip(buffers, before, strict=True):
        assert torch.equal(got[3], old[5]) and torch.equal(got[5], old[3])
        keep = [r for r in range(16) if r not in (3, 5)]
        assert torch.equal(got[keep], old[keep])


def test_copy_with_nothing_to_copy_is_a_no_op():
    buffers = _kv_buffers(4, torch.Generator().manual_seed(0))
    before = [b.clone() for b in buffers]
    data_ptrs, strides = _pointers(buffers)
    empty = torch.empty(0, dtype=torch.int64)
    sk.copy_all_layer_kv_cache_cpu(data_ptrs, strides, empty, empty)
    zero = torch.zeros(1, dtype=torch.int64)  # SGLang's warm-up call: row 0 onto itself
    sk.copy_all_layer_kv_cache_cpu(data_ptrs, strides, zero, zero)
    assert all(torch.equal(a, b) for a, b in zip(buffers, before, strict=True))
    with pytest.raises(RuntimeError, match="uint64"):
        sk.copy_all_layer_kv_cache_cpu(data_ptrs.to(torch.int64), strides, zero, zero)


@pytest.mark.parametrize("op", ["decode_attention_cpu", "weight_packed_linear", "fused_experts_cpu"])
def test_every_other_op_is_refused_by_name(op):
    with pytest.raises(AttributeError, match=rf"sgl_kernel\.{op} .*STAND-IN"):
        getattr(sk, op)
    assert not hasattr(sk, op)  # so SGLang's optional-feature probes see it as absent
    assert sorted(sk.__all__) == ["assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu"]


@pytest.mark.parametrize(
    "op", ["build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu", "fill_bonus_tokens_cpu"]
)
def test_speculative_ops_sglang_imports_on_cpu_import_but_refuse_to_run(op):
    assert op in sk.IMPORTED_NOT_IMPLEMENTED
    refuse = getattr(sk, op)  # `from sgl_kernel import op` at sglang's module load must succeed
    with pytest.raises(NotImplementedError, match=rf"sgl_kernel\.{op} .*STAND-IN"):
        refuse(torch.zeros(1))


def test_the_module_says_it_is_a_stand_in_never_in_a_product_image():
    doc = sk.__doc__ or ""
    assert "STAND-IN" in doc and "never in a product image" in doc
