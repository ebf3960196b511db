"""Short words for long ones: a profiler's C++ kernel name as a reader knows it, and a failure's cause without the
numbers of its shapes, sizes and addresses."""

from __future__ import annotations

import re

_OPEN, _CLOSE = "<({[", ">)}]"


def _top_level(name: str) -> str:
    """`name` with every bracketed part (template arguments, parameter lists, lambdas) dropped; `->` is no bracket."""
    out, depth = [], 0
    for i, char in enumerate(name):
        if char == ">" and i and name[i - 1] == "-":
            continue
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(char)
    return "".join(out)


def short_kernel_name(name: str) -> str:
    """A kernel as a reader recognises it: no return type, namespaces, template arguments or parameters
    (`void flash::flash_fwd_kernel<Traits<128, ...>>(...)` is `flash_fwd_kernel`); a plain name as it is."""
    name = " ".join(str(name).split())
    if not re.search(r"<|\w\(", name):
        return name  # "_attn_fwd", "aten::copy_", "Memcpy DtoD (Device -> Device)"
    words = _top_level(name).split()
    last = words[-1] if words else ""
    return last.rsplit("::", 1)[-1] or name


# Shapes, sizes and addresses: what differs between records that failed for one cause.
_NUMBERS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"[\[(]\s*-?\d+(?:\s*,\s*-?\d+)+\s*,?\s*[\])]"), "[…]"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:[KMGT]i?B|bytes|B)\b"), "… bytes"),
    (re.compile(r"(?<![\w.])\d{3,}(?![\w.])"), "…"),
)


def cause_of(reason: str) -> str:
    """A failure's reason with its shapes, sizes and addresses replaced by …, so that records that failed for one
    cause read alike whatever their case."""
    text = " ".join(str(reason).split())
    for pattern, replacement in _NUMBERS:
        text = pattern.sub(replacement, text)
    return text
