"""Short kernel names on every kernel name of the real nsys fixtures (nsys stats' own lists)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsight_magic.analysis.names import short_kernel_name, short_names


@pytest.fixture(scope="module")
def all_names(data_dir: Path) -> pd.Series:
    names: set[str] = set()
    for csv in sorted((data_dir / "nsys_stats").glob("*_cuda_gpu_kern_sum.csv")):
        names |= set(pd.read_csv(csv)["Name"])
    return pd.Series(sorted(names))


def _name(all_names: pd.Series, *parts: str) -> str:
    hits = [n for n in all_names if all(p in n for p in parts)]
    assert len(hits) == 1, hits
    return hits[0]


def test_short_form_keeps_function_name_and_numbers(all_names):
    softmax = _name(all_names, "softmax_warp_forward<float, float, float, (int)9")
    assert short_kernel_name(softmax) == "softmax_warp_forward<9, 0, 0>"
    mul = _name(all_names, "elementwise_kernel<(int)128, (int)2", "MulFunctor")
    assert short_kernel_name(mul) == "elementwise_kernel<128, 2>"
    index = _name(all_names, "indexSelectSmallIndex<float")
    assert short_kernel_name(index) == "indexSelectSmallIndex<2, 2, -2>"  # negative literal
    # <unnamed> namespaces are not template brackets
    assert short_kernel_name(_name(all_names, "elementwise_kernel_with_index")) == (
        "elementwise_kernel_with_index"
    )
    for plain in all_names[~all_names.str.contains("<")]:  # cuBLAS, cuDNN, nvjet kernels
        assert short_kernel_name(plain) == plain
    assert short_kernel_name("_Z6kernelPf") == "_Z6kernelPf"


def test_short_names_stay_distinct(all_names):
    labels = short_names(all_names)
    # every kernel name of every nsys_stats CSV: the first captures, the LLM/ranks ones, the
    # idle-time (host capture) ones, the training-step ones and the sweep's Llama prefill
    assert labels.nunique() == all_names.nunique() == 118
    assert (labels.index == all_names.index).all()
    by_name = dict(zip(all_names, labels, strict=True))
    # Eight vectorized_elementwise_kernel<4> kernels: the functor or function tells them apart.
    cos = _name(all_names, "cos_kernel_cuda")
    assert by_name[cos] == "vectorized_elementwise_kernel<4> [cos_kernel_cuda]"
    # two ArgMax reductions (bf16 logits, fp32 logits): the op, then a type tells them apart
    argmax = _name(all_names, "ReduceOp<c10::BFloat16, at::native::ArgMaxOps")
    assert by_name[argmax] == "reduce_kernel<512, 1> [ArgMaxOps, BFloat16]"
    # two <128, 2> elementwise kernels (the training step added the second): the functor
    # tells them apart
    mul = _name(all_names, "elementwise_kernel<(int)128, (int)2", "MulFunctor")
    add = _name(all_names, "elementwise_kernel<(int)128, (int)2", "CUDAFunctor_add")
    assert by_name[mul] == "elementwise_kernel<128, 2> [BinaryFunctor]"
    assert by_name[add] == "elementwise_kernel<128, 2> [CUDAFunctor_add]"


def test_short_names_of_repeated_rows_and_hash_fallback():
    a = "void k<(int)1, float>(T1)"
    b = "void k<(int)1, float>(T1, int)"  # differ only in parameters: no identifier tells
    rows = pd.Series([a, b, a], index=[10, 11, 12])
    labels = short_names(rows)
    assert labels[10] == labels[12] != labels[11]
    assert labels[10].startswith("k<1> #") and labels[11].startswith("k<1> #")
    assert short_names(pd.Series([a]))[0] == "k<1>"  # the same name alone: no suffix


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(st.lists(st.text(alphabet="<>()[]{}:,# ak_019-", max_size=30), max_size=40))
def test_any_names_give_unique_labels(names):
    """Damaged or adversarial names (unbalanced brackets, a literal equal to another's tagged
    form) never raise and never share a label."""
    series = pd.Series(names, dtype=object)
    labels = short_names(series)
    assert labels.groupby(series.to_numpy()).nunique().le(1).all()  # one label per name
    assert labels.nunique() == series.nunique()
