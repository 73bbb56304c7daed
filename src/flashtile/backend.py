"""Backend selection: which implementation runs a call.

``FLASHTILE_BACKEND`` (environment) or :func:`set_backend` (Python) picks one of

- ``auto``   CUDA tensors run the Triton kernels, CPU tensors the torch path (default);
- ``triton`` always the Triton kernels. CPU tensors then need ``TRITON_INTERPRET=1`` set before
  triton is imported (that is how CI runs the kernels without a GPU);
- ``torch``  always the exact chunked PyTorch path (``flashtile.reference.tiled``).
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "triton", "torch")
_override: str | None = None


def set_backend(name: str | None) -> None:
    """Force a backend for this process (``None`` goes back to ``FLASHTILE_BACKEND``/auto)."""
    global _override
    if name is not None and name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    _override = name


def get_backend() -> str:
    """The configured backend name: the override, else ``FLASHTILE_BACKEND``, else ``auto``."""
    if _override is not None:
        return _override
    name = os.environ.get("FLASHTILE_BACKEND", "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise ValueError(
            f"FLASHTILE_BACKEND must be one of {BACKENDS}, got {name!r}; "
            "unset it or export FLASHTILE_BACKEND=auto"
        )
    return name


def interpreter_enabled() -> bool:
    """True when Triton runs kernels on the CPU (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # pragma: no cover - depends on the platform
        return False
    return True


def resolve(device: torch.device) -> str:
    """The backend that runs a call whose tensors live on ``device``: ``"triton"`` or ``"torch"``."""
    name = get_backend()
    if name == "torch":
        return "torch"
    if name == "auto":
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    # name == "triton"
    if device.type == "cuda":
        return "triton"
    if device.type == "cpu" and interpreter_enabled():
        return "triton"
    raise ValueError(
        f"FLASHTILE_BACKEND=triton needs CUDA tensors, got tensors on {device}; move them to a GPU, "
        "set TRITON_INTERPRET=1 before importing triton to interpret the kernels on CPU, "
        "or use FLASHTILE_BACKEND=torch"
    )
