"""A library kept out of the environment until attnbench has imported the library that probes for it.

flash-attn-4 installs `flash_attn/cute` and no `flash_attn/__init__.py`: `flash_attn` is a namespace package.
xformers 0.0.35 decides at import whether FlashAttention 2 is installed by probing for that name
(xformers/ops/fmha/flash.py: `if importlib.util.find_spec("flash_attn"):` then `import
flash_attn.flash_attn_interface`), so with flash-attn-4 on sys.path and no FlashAttention 2, `import xformers.ops`
fails with `No module named 'flash_attn.flash_attn_interface'`. Without a `flash_attn` to find, the same module takes
its other branch: PyTorch's own FlashAttention 2 (`_USE_PT_FLASH_ATTN`, after `ensure_pt_flash_ok()`).

So the GPU image built without FlashAttention 2 (Dockerfile, FLASH_ATTN_2=no) installs flash-attn-4 into a
directory of its own, named by ATTNBENCH_FLASH_ATTN_4_PATH, instead of the virtual environment. attnbench imports
xformers.ops first (when xformers is installed), then appends that directory to sys.path: xformers has probed an
environment without `flash_attn`, and `flash_attn.cute` is FlashAttention 4. Neither library is changed. The order is
the arrangement: in that image a plain `python -c "import flash_attn.cute; import xformers.ops"` with the directory
on PYTHONPATH still fails, as it would in any environment holding both without FlashAttention 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

FLASH_ATTN_4_PATH = "ATTNBENCH_FLASH_ATTN_4_PATH"
# The module that probes for `flash_attn` once, at its import.
PROBING_MODULE = "xformers.ops"


def add_flash_attn_4_path(environ: Mapping[str, str] = os.environ) -> str | None:
    """Append the directory ATTNBENCH_FLASH_ATTN_4_PATH names to sys.path, after importing xformers.ops where
    xformers is installed; the directory, or None when there is nothing to add (unset, missing, already there)."""
    path = environ.get(FLASH_ATTN_4_PATH)
    if not path or not os.path.isdir(path) or path in sys.path:
        return None
    import importlib.util

    if importlib.util.find_spec(PROBING_MODULE.partition(".")[0]) is not None:
        from attnbench.backends.base import quiet_import

        try:
            quiet_import(PROBING_MODULE)
        except Exception:  # noqa: BLE001 - the xformers backend reports why, in its own row
            pass
    sys.path.append(path)
    return path
