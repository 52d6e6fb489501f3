"""The GPTQ solver (Frantar et al., 2022): round one Linear weight to INT4 so that its outputs on the
calibration inputs change least, given their Hessian H = 2/n sum(x x^T).

Implemented from the paper:
- dead inputs (diag(H) == 0, never non-zero in calibration): H[i, i] = 1, so they neither take nor
  pass on error; their weights are kept and rounded with their group (not zeroed: calibration not
  seeing an input is no proof that serving never does);
- dampening: damp x mean(diag(H)) is added to the diagonal;
- the Cholesky factor U (upper) of H^-1 drives the error feedback: after rounding column j, the scaled
  error (w_j - q_j) / U[j, j] is subtracted from the later columns along U[j, :]; columns go in blocks of
  128 whose updates reach the rest of the matrix once per block ("lazy batch");
- symmetric INT4 with groups of `group_size` input columns, scales per (row, group) as RTN computes
  them (`int4_rounding`), from the group's error-updated weights at the moment the group starts.

Activation ordering (`act_order`): columns are processed by descending diag(H), but groups stay the
original runs of `group_size` columns, so the artifact needs no g_idx and loads like RTN's. A group
starts when its first column in processing order is reached; its scale is then computed from the
current (error-updated) values of all its columns, including those whose block update is still
pending, which are brought up to date for the purpose. Columns of a group rounded later keep being
updated after the scale is fixed; their codes clamp to [-8, 7] like any other.

With a diagonal H (the identity included) no error is passed on, and the result equals RTN bit for bit;
a huge dampening comes close to that.
"""

from __future__ import annotations

import torch

from kvant_runtime.gptq.int4_rounding import Rounded, Rounding, group_scale, round_codes

BLOCK = 128  # columns per lazy-batch block; a multiple of every group size, so groups sit inside blocks


class NotPositiveDefinite(ValueError):
    """The dampened Hessian has no Cholesky factor (a larger damp fixes it)."""


def gptq_round(
    weight: torch.Tensor, hessian: torch.Tensor, rounding: Rounding, *, damp: float, act_order: bool
) -> Rounded:
    """GPTQ of a float32 `[out, in]` weight, on the Hessian's device."""
    device = hessian.device
    work = weight.to(device=device, dtype=torch.float32).clone()
    rows, cols = work.shape
    h = hessian.to(torch.float64).clone()
    diagonal = h.diagonal()
    order = (
        torch.argsort(diagonal, descending=True, stable=True)
        if act_order
        else torch.arange(cols, device=device)
    )
    diagonal[diagonal == 0] = 1.0
    diagonal += damp * diagonal.mean()
    upper = _inverse_cholesky_upper(h[order][:, order]).to(torch.float32)

    work = work[:, order]
    group_of = order // rounding.group_size  # the (original) group of each processed column
    members = torch.argsort(order).reshape(-1, rounding.group_size)  # processed positions, by group
    scales = torch.zeros(rows, cols // rounding.group_size, dtype=torch.float32, device=device)
    started = [False] * scales.shape[1]
    codes = torch.zeros(rows, cols, dtype=torch.float32, device=device)

    for start in range(0, cols, BLOCK):
        end = min(start + BLOCK, cols)
        block, errors = work[:, start:end].clone(), torch.zeros(rows, end - start, device=device)
        u = upper[start:end, start:end]
        for i in range(end - start):
            group = int(group_of[start + i])
            if not started[group]:
                current = _current_values(work, block, errors, upper, members[group], start, end)
                scales[:, group] = group_scale(current, rounding)
                started[group] = True
            column, scale = block[:, i], scales[:, group]
            code = round_codes(column, scale, rounding)
            codes[:, start + i] = code
            error = (column - code * scale) / u[i, i]
            block[:, i:] -= error.unsqueeze(1) * u[i, i:].unsqueeze(0)
            errors[:, i] = error
        work[:, end:] -= errors @ upper[start:end, end:]

    unpermuted = torch.empty_like(codes)
    unpermuted[:, order] = codes
    return Rounded(unpermuted.to(torch.int8), scales.to(rounding.scale_dtype))


def _inverse_cholesky_upper(h: torch.Tensor) -> torch.Tensor:
    """U with U^T U = H^-1 (upper triangular), in float64."""
    lower, info = torch.linalg.cholesky_ex(h)
    if int(info) != 0:
        raise NotPositiveDefinite("the dampened Hessian is not positive definite")
    inverse = torch.cholesky_inverse(lower)
    upper, info = torch.linalg.cholesky_ex(inverse, upper=True)
    if int(info) != 0:
        raise NotPositiveDefinite("the inverse Hessian is not positive definite")
    result: torch.Tensor = upper
    return result


def _current_values(  # noqa: PLR0917 - the solver's state, passed as it is named there
    work: torch.Tensor,
    block: torch.Tensor,
    errors: torch.Tensor,
    upper: torch.Tensor,
    positions: torch.Tensor,
    start: int,
    end: int,
) -> torch.Tensor:
    """The error-updated values `[rows, group]` of a group's columns (processed positions, all not yet
    rounded): from the block being processed, or from `work` plus this block's pending updates."""
    values = torch.empty(work.shape[0], positions.numel(), dtype=torch.float32, device=work.device)
    inside = (positions >= start) & (positions < end)
    if inside.any():
        values[:, inside] = block[:, positions[inside] - start]
    if (~inside).any():
        later = positions[~inside]
        values[:, ~inside] = work[:, later] - errors @ upper[start:end, later]
    return values
