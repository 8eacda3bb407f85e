"""Device policy: which device a rule runs on, and the numerics its guards need there.

* :func:`pick_device` — ``auto`` = CUDA when present, else the CPU. Choosing CUDA
  also sets ``CUBLAS_WORKSPACE_CONFIG`` (when unset) before cuBLAS starts, which
  cuBLAS needs for bit-for-bit repeatable matrix products.
* :func:`exact_numerics` — the settings under which the guards of protocol §5
  and §6 compare like with like on a GPU: float32 matrix products in full
  float32 (no TF32, in cuBLAS and cuDNN), reductions of float16/bfloat16
  products in float32, deterministic algorithms (warning, not failing, where an
  op has none), cuDNN deterministic without autotuning, and the math kernel of
  ``scaled_dot_product_attention``. Every setting is restored on exit. On a CPU
  none of them changes a result (TF32 and the attention kernels are CUDA
  features); the context is entered there too, so both devices run one code path.

What the guards can promise on a GPU (float32 model, under :func:`exact_numerics`):

* **exact on a GPU too** — hook cut vs zeroed output-projection columns
  (``ablation.hook_tolerance: 0.0``); logits identical after the hooks are
  removed; the key-group cuts (heads outside the group, earlier layers and the
  restored model move by exactly 0). Each compares two forward passes of the same
  shapes through the same kernels whose inputs differ only by terms that are
  exactly 0 on both sides (a zeroed input slice vs zeroed weight entries: every
  product involved is 0 in either case, and 0 stays 0 under any rounding, TF32's
  included). What could break them is a kernel that sums in a run-dependent
  order (atomics, split-K with a shared workspace); deterministic algorithms and
  the cuBLAS workspace setting rule that out. The model is loaded with eager
  attention, so no fused attention kernel is involved; where one is (the sweep's
  character model), both sides of a comparison use the same kernel anyway.
* **within a bound** — batched cuts vs the one-at-a-time loop: different batch
  compositions (and the reused prefix) are different matrix shapes, so different
  tilings and summation orders; float32 rounding of order 1e-6 on losses of a few
  nats, as on the CPU. Every such guard's bound is derived from that rounding
  (:class:`headwatch.guards.Rounding`: u × the size of the numbers × the depth and
  width of the computation, times ``*.rounding_factor``). Mean cut vs its bias form:
  the same terms added in a different order, compared with the model in float64 on
  both devices (float64's u). The by-hand map: float64 on the CPU against the
  model's float32; ~1e-7 on either device. All three need TF32 off: TF32 keeps
  10 mantissa bits (relative error ~1e-3 per product), which alone would exceed
  each of these bounds — hence :func:`exact_numerics`.
"""
from __future__ import annotations

import contextlib
import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

#: Workspace setting cuBLAS needs for repeatable results (PyTorch's reproducibility notes).
CUBLAS_WORKSPACE = ":4096:8"


def pick_device(setting: str = "auto") -> torch.device:
    """``auto`` = CUDA when present, else CPU; any other value is a torch device string."""
    if setting == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(setting)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    return device


def _switches() -> list[tuple[str, object, str, object]]:
    """(name, owner, attribute, value under exact numerics) of every switch this torch has. TF32:
    the ``fp32_precision`` settings where they exist (torch >= 2.9), else the ``allow_tf32`` flags."""
    b = torch.backends
    if hasattr(b.cuda.matmul, "fp32_precision"):
        tf32 = [("cuda.matmul.fp32_precision", b.cuda.matmul, "fp32_precision", "ieee"),
                ("cudnn.fp32_precision", b.cudnn, "fp32_precision", "ieee")]
        tf32 += [(f"cudnn.{n}.fp32_precision", getattr(b.cudnn, n), "fp32_precision", "ieee")
                 for n in ("conv", "rnn") if hasattr(b.cudnn, n)]
    else:
        tf32 = [("cuda.matmul.allow_tf32", b.cuda.matmul, "allow_tf32", False),
                ("cudnn.allow_tf32", b.cudnn, "allow_tf32", False)]
    out = tf32 + [
        ("cuda.matmul.allow_fp16_reduced_precision_reduction", b.cuda.matmul,
         "allow_fp16_reduced_precision_reduction", False),
        ("cuda.matmul.allow_bf16_reduced_precision_reduction", b.cuda.matmul,
         "allow_bf16_reduced_precision_reduction", False),
        ("cudnn.deterministic", b.cudnn, "deterministic", True),
        ("cudnn.benchmark", b.cudnn, "benchmark", False)]
    det = getattr(torch.utils, "deterministic", None)
    if det is not None and hasattr(det, "fill_uninitialized_memory"):   # a debugging aid, not needed here
        out.append(("utils.deterministic.fill_uninitialized_memory", det, "fill_uninitialized_memory", False))
    return out


def numerics() -> dict:
    """The settings :func:`exact_numerics` controls, as they are now (for a guard's record)."""
    rec = {name: getattr(o, a) for name, o, a, _ in _switches()}
    rec.update(float32_matmul_precision=torch.get_float32_matmul_precision(),
               deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
               cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    return rec


@contextlib.contextmanager
def exact_numerics():
    """Full float32 matrix products, deterministic kernels and math attention while inside; every
    setting restored on exit (also when the body raises). Yields :func:`numerics` as set inside."""
    switches = _switches()
    saved = [(o, a, getattr(o, a)) for _, o, a, _ in switches]
    precision = torch.get_float32_matmul_precision()
    det, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        torch.set_float32_matmul_precision("highest")
        for _, o, a, value in switches:
            setattr(o, a, value)
        torch.use_deterministic_algorithms(True, warn_only=True)
        with sdpa_kernel(SDPBackend.MATH):
            yield numerics()
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.set_float32_matmul_precision(precision)
        for o, a, value in saved:
            setattr(o, a, value)
