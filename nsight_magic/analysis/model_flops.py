"""Model FLOPs: the arithmetic a computation needs by its definition, not what the hardware ran.

MFU divides these by time; HFU divides the FLOPs ncu counted, which include the padding of
partial tiles (an 8192^3 bf16 GEMM measured 82.8% HFU but 81.6% MFU on H200). Two sources:

- :func:`gemm_flops`: a matrix multiply's 2*M*N*K from the shapes PyTorch records for its op
  (nsys ``--pytorch=autograd-shapes-nvtx``, or ``emit_nvtx(record_shapes=True)`` under ncu).
  Bias adds and the alpha/beta epilogue are not counted (the usual convention; they are
  O(M*N) against O(M*N*K)).
- :func:`transformer_flops`: a whole dense transformer, from its size (PaLM's formula).
- :func:`training_step_flops`: the same for a training step, split into its forward and
  backward phases (backward = 2x forward, as Megatron and PaLM count), keyed for ``mfu()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import BadArgumentError
from ..vocabulary.arguments import count_arg, number_arg

__all__ = ["GEMM_OPS", "TrainingFlops", "gemm_flops", "training_step_flops", "transformer_flops"]

# PyTorch ops whose math is a (batched) matrix multiply and whose recorded shapes give it.
GEMM_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
)

Shape = Sequence[int]


def _dims(shape: object) -> tuple[int, ...] | None:
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def _batched(a: Shape, b: Shape) -> float | None:
    """2*batch*M*K*N of ``a @ b`` with torch.matmul's rules (1-D operands, broadcast batch)."""
    if not a or not b:
        return None
    if len(a) == 1 and len(b) == 1:
        return 2.0 * a[0] if a[0] == b[0] else None
    if len(a) == 1:  # vector @ (..., K, N)
        return 2.0 * math.prod(b[:-2]) * b[-2] * b[-1] if a[0] == b[-2] else None
    if len(b) == 1:  # (..., M, K) @ vector
        return 2.0 * math.prod(a[:-2]) * a[-2] * a[-1] if a[-1] == b[0] else None
    if a[-1] != b[-2]:
        return None
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch = 1
    for x, y in zip((1,) * (width - len(batch_a)) + tuple(batch_a),
                    (1,) * (width - len(batch_b)) + tuple(batch_b), strict=True):  # fmt: skip
        if x != y and 1 not in (x, y):
            return None  # shapes that do not broadcast: not a matmul we understand
        batch *= max(x, y)
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def gemm_flops(op: str, shapes: Sequence[object]) -> float | None:
    """2*M*N*K (times the batch) of one call of a GEMM op from its recorded input shapes, e.g.
    ``gemm_flops("aten::mm", [[64, 256], [256, 768]])`` = 2*64*256*768; None for other ops or
    shapes that do not fit the op.

    Inputs as PyTorch records them: ``mm(a, b)``, ``bmm(a, b)``, ``matmul(a, b)``;
    ``addmm(bias, a, b, ...)``, ``baddbmm(bias, a, b, ...)``; ``linear(x, weight[out, in],
    bias)`` = x @ weight.T."""
    dims = [_dims(s) for s in shapes]
    if op in ("aten::mm", "aten::bmm", "aten::matmul") and len(dims) >= 2:
        a, b = dims[0], dims[1]
    elif op in ("aten::addmm", "aten::baddbmm") and len(dims) >= 3:
        a, b = dims[1], dims[2]
    elif op == "aten::linear" and len(dims) >= 2:
        x, w = dims[0], dims[1]
        if not x or not w or len(w) != 2 or x[-1] != w[1]:
            return None
        return 2.0 * math.prod(x[:-1]) * w[1] * w[0]
    else:
        return None
    if a is None or b is None:
        return None
    if op == "aten::mm" and not (len(a) == len(b) == 2):
        return None
    if op in ("aten::bmm", "aten::baddbmm") and not (len(a) == len(b) == 3 and a[0] == b[0]):
        return None
    return _batched(a, b)


def transformer_flops(
    n_params: float,
    tokens: float,
    *,
    n_layers: int | None = None,
    seq_len: int | None = None,
    d_model: int | None = None,
    training: bool = False,
    causal: bool = False,
) -> float:
    """Model FLOPs of a dense transformer over ``tokens`` tokens (PaLM, Chowdhery et al. 2022,
    appendix B): per token 2N forward (6N with backward), plus self-attention 4·L·T·d forward
    (12·L·H·Q·T with backward) when ``n_layers``, ``seq_len`` and ``d_model`` are given.
    ``causal=True`` halves the attention term (only half the score matrix is computed)."""
    n_params = number_arg(n_params, "n_params", "transformer_flops()")
    tokens = number_arg(tokens, "tokens", "transformer_flops()")
    for name, value in (("n_layers", n_layers), ("seq_len", seq_len), ("d_model", d_model)):
        if value is not None:
            count_arg(value, name, "transformer_flops()", minimum=1)
    per_token = 2.0 * n_params
    if n_layers is not None and seq_len is not None and d_model is not None:
        attention = 4.0 * n_layers * seq_len * d_model
        per_token += attention / 2 if causal else attention
    elif any(v is not None for v in (n_layers, seq_len, d_model)):
        raise BadArgumentError(
            "transformer_flops(): the attention term needs all of n_layers, seq_len and "
            "d_model; pass all three, or none."
        )
    return per_token * (3.0 if training else 1.0) * tokens


@dataclass(frozen=True)
class TrainingFlops:
    """Model FLOPs of one training step by phase: ``forward`` (2N per token + attention),
    ``backward`` (twice the forward: a GEMM's backward is two GEMMs of its size, one for the
    input's gradient and one for the weight's), ``step`` = forward + backward (6N per token;
    the optimizer's O(N) update is not counted, as nobody's MFU counts it)."""

    forward: float
    backward: float

    @property
    def step(self) -> float:
        return self.forward + self.backward

    def by_range(
        self,
        forward: str = "train@fwd",
        backward: str = "train@bwd",
        step: str | None = None,
        *,
        domain: str = "train",
    ) -> dict[str, float]:
        """``{"domain:range": FLOPs}`` for ``NsysRun.mfu(flops=...)``: the forward and backward
        ranges (and the whole step's range, when named). The defaults are the ``train@fwd`` /
        ``train@bwd`` push/pop ranges of domain ``train`` (docs/training.md)."""
        prefix = f"{domain}:" if domain else ""
        out = {f"{prefix}{forward}": self.forward, f"{prefix}{backward}": self.backward}
        if step is not None:
            out[f"{prefix}{step}"] = self.step
        return out


def training_step_flops(
    n_params: float,
    tokens: float,
    *,
    n_layers: int | None = None,
    seq_len: int | None = None,
    d_model: int | None = None,
    causal: bool = True,
) -> TrainingFlops:
    """Model FLOPs of a dense transformer's training step over ``tokens`` tokens (batch x
    sequence), by phase: forward = :func:`transformer_flops` (2N per token, plus the
    self-attention term 4·L·T·d per token when ``n_layers``, ``seq_len`` and ``d_model`` are
    given, halved for ``causal`` attention, the default for a decoder); backward = 2x forward;
    step = 6N per token + 3x the attention term. ``n_params``: the parameters that take part
    in the matmuls (leave the embedding table out: a lookup is no multiply; keep a tied or
    separate LM head in). E.g. a GPT of 2 layers, width 256, vocab 4096, batch 8 x 256::

        f = training_step_flops(n_params, 8 * 256, n_layers=2, seq_len=256, d_model=256)
        run.mfu(flops=f.by_range())        # train:train@fwd and train:train@bwd
    """
    forward = transformer_flops(
        n_params, tokens, n_layers=n_layers, seq_len=seq_len, d_model=d_model, causal=causal
    )
    return TrainingFlops(forward=forward, backward=2.0 * forward)
