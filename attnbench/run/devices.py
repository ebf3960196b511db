"""Several GPUs on one machine: one worker per GPU, taking whole cases from a shared queue."""

from __future__ import annotations

from attnbench.core.errors import AttnbenchError


def parse_devices(text: str) -> list[int]:
    """'0,1,2,3' -> [0, 1, 2, 3], else a user error."""
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise AttnbenchError(f"--devices {text!r}: expected GPU indices separated by commas, e.g. 0,1,2,3") from None
    if not indices or min(indices) < 0 or len(set(indices)) != len(indices):
        raise AttnbenchError(f"--devices {text!r}: expected distinct GPU indices (0 or more), e.g. 0,1,2,3")
    return indices


def physical_gpu(index: int, visible: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry of this process's GPU `index`, so a child sees the same GPU: with
    CUDA_VISIBLE_DEVICES=4,5 index 0 is GPU 4 (or a UUID / MIG id, as written)."""
    if visible is None or not visible.strip():
        return str(index)
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if index >= len(entries):
        raise AttnbenchError(f"--devices: no GPU {index} here; CUDA_VISIBLE_DEVICES={visible} makes {len(entries)} "
                             f"visible (0..{len(entries) - 1})")
    return entries[index]


def worker_env(index: int, visible: str | None) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": physical_gpu(index, visible)}


def check_devices(device: str, indices: list[int]) -> list[str]:
    """A user error for a missing index or mixed models."""
    if device != "cuda":
        return []
    import torch

    count = torch.cuda.device_count()
    missing = [i for i in indices if i >= count]
    if missing:
        raise AttnbenchError(f"--devices: no GPU {missing[0]} here; this machine has {count} (0..{count - 1})")
    names = [torch.cuda.get_device_name(i) for i in indices]
    if len(set(names)) > 1:
        raise AttnbenchError(f"--devices: mixed GPU models ({', '.join(sorted(set(names)))}); their numbers do not "
                             f"belong in one run: run one shard per model instead")
    return names
