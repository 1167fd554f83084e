"""A candidate build for the numerics evidence (benchmarks/numerics_candidates.py, numerics_kl.py): on PYTHONPATH,
this startup hook changes one aten op class of this torch through torch.library (MPSUP_NUM_CASE), so both a model
run whole and an op replayed by torch.ops.aten see it (a Python patch of F.linear would hide from the replay):

    matmul   mm and addmm (bmm too with MPSUP_NUM_BMM=1) on float32 inputs computed in MPSUP_NUM_LOW (bfloat16)
    softmax  _softmax and the CPU attention kernel's softmax computed in MPSUP_NUM_LOW
    norm     rsqrt and mean.dim (what Llama's RMSNorm calls besides pow and mul) computed in MPSUP_NUM_LOW
    threads  speed only: one CPU thread (OMP_NUM_THREADS=1, set_num_threads pinned at 1)

The kernels are registered for MPSUP_NUM_KEY (CPU). Each replacement reaches only ops it does not replace, so it
never calls itself: baddbmm's CPU kernel is its own, not mm's, addmm's or bmm's."""

import os
import warnings

_case = os.environ.get("MPSUP_NUM_CASE", "")
_key = os.environ.get("MPSUP_NUM_KEY", "CPU")
if _case == "threads":
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    _set = torch.set_num_threads
    _set(1)
    torch.set_num_threads = lambda n: _set(1)  # the worker's own request keeps one thread too
elif _case:
    import torch

    _aten = torch.ops.aten
    _low = getattr(torch, os.environ.get("MPSUP_NUM_LOW", "bfloat16"))

    def _product(a, b, dtype):
        a3, b3 = a.to(dtype).unsqueeze(0), b.to(dtype).unsqueeze(0)
        out = _aten.baddbmm.default(a3.new_empty(1, a.shape[0], b.shape[1]), a3, b3, beta=0)
        return out.squeeze(0)

    def _mm(a, b):
        low = _low if a.dtype == torch.float32 else a.dtype
        return _product(a, b, low).to(a.dtype)

    def _addmm(bias, a, b, beta=1, alpha=1):
        out = _mm(a, b)
        if alpha != 1:
            out = out * alpha
        return out if beta == 0 else out + (bias if beta == 1 else bias * beta)

    def _bmm(a, b):
        low = _low if a.dtype == torch.float32 else a.dtype
        empty = a.new_empty(a.shape[0], a.shape[1], b.shape[2], dtype=low)
        out = _aten.baddbmm.default(empty, a.to(low), b.to(low), beta=0)
        return out.to(a.dtype)

    def _soft(x, dim):
        low = _low if x.dtype == torch.float32 else x.dtype
        y = x.to(low)
        e = (y - _aten.amax.default(y, [dim], True)).exp()
        return (e / e.sum(dim, keepdim=True)).to(x.dtype)

    def _softmax(x, dim, half_to_float):
        out = _soft(x, dim)
        return out.float() if half_to_float else out

    def _sdpa_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
        if k.dim() == 4 and q.shape[1] != k.shape[1]:
            reps = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(reps, dim=1), v.repeat_interleave(reps, dim=1)
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if is_causal:
            keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()
            s = s.masked_fill(~keep, float("-inf"))
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
        lse = torch.logsumexp(s, dim=-1)
        out = torch.matmul(_soft(s, -1), v)
        return out, lse.to(torch.float32)

    def _rsqrt(x):
        low = _low if x.dtype == torch.float32 else x.dtype
        return _aten.pow.Tensor_Scalar(x.to(low), -0.5).to(x.dtype)

    def _mean(x, dim, keepdim=False, *, dtype=None):
        src = x if dtype is None else x.to(dtype)
        low = _low if src.dtype == torch.float32 else src.dtype
        n = 1
        for d in dim if dim else range(x.dim()):
            n *= x.shape[d]
        total = _aten.sum.dim_IntList(src.to(low), dim, keepdim)
        return (total / n).to(src.dtype)

    _CASES = {
        "matmul": {"mm": _mm, "addmm": _addmm, **({"bmm": _bmm} if os.environ.get("MPSUP_NUM_BMM") == "1" else {})},
        "softmax": {"_softmax": _softmax, "_scaled_dot_product_flash_attention_for_cpu": _sdpa_cpu},
        "norm": {"rsqrt": _rsqrt, "mean.dim": _mean},
    }
    _lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _name, _fn in _CASES[_case].items():
            _lib.impl(_name, _fn, _key)
