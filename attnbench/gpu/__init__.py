"""The GPU's state read, judged and sampled per measurement (docs/gpu.md): `state` the values, `judge` pure
judgements, `nvml`/`smi` the readers, `read` the choice of reader, `sample` per-timing samples, `describe` words,
`energy` NVML's counter. Nothing here prints or advises (doctor does)."""
