"""What a record's `memory_method` says that its reader acts on:
a GPU peak read from host RSS is no device memory."""

from __future__ import annotations

# a runtime with its own allocator on the host: the RSS high-water mark, reset by Linux `clear_refs`
RSS_METHOD = "process peak RSS (/proc/self/status VmHWM, reset by clear_refs)"
# a stored GPU record whose peak was host RSS, read back
STORED_RSS_ON_GPU = "none: the stored peak was host RSS, which is not device memory"


def host_peak_on_gpu(device: str | None, method: str | None) -> bool:
    """Whether a stored GPU record's peak is host RSS
    (a run before RSS was refused on a GPU): not device memory."""
    return device == "cuda" and method == RSS_METHOD
