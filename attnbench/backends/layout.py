"""flash-attn-4 kept off sys.path until xformers.ops has imported (docs/docker.md): flash-attn-4 makes
`flash_attn` a namespace package, and xformers 0.0.35 probes for it at import (xformers/ops/fmha/flash.py
`find_spec("flash_attn")`, then `import flash_attn.flash_attn_interface`), which fails without FlashAttention
2. """

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

FLASH_ATTN_4_PATH = "ATTNBENCH_FLASH_ATTN_4_PATH"
PROBING_MODULE = "xformers.ops"


def add_flash_attn_4_path(environ: Mapping[str, str] = os.environ) -> str | None:
    """Append ATTNBENCH_FLASH_ATTN_4_PATH to sys.path after importing xformers.ops; the directory, or None."""
    path = environ.get(FLASH_ATTN_4_PATH)
    if not path or not os.path.isdir(path) or path in sys.path:
        return None
    import importlib.util

    if importlib.util.find_spec(PROBING_MODULE.partition(".")[0]) is not None:
        from attnbench.backends.base import quiet_import

        try:
            quiet_import(PROBING_MODULE)
        except Exception:  # the xformers backend reports why, in its own row
            pass
    sys.path.append(path)
    return path
