"""The GPU's state — clocks, power, temperature, modes, other processes — read, judged, and sampled per measurement.

Numbers from a throttling or shared GPU are not the GPU's numbers, so every CUDA run records the state of its
GPUs. The modules, from the bottom up:

- `state`: what is known about one GPU (GpuId, GpuState, GpuProcess) and the clock event reasons' names;
- `judge`: pure judgements of a state (throttled? clocks locked? which listed process is the harness?);
- `nvml`, `smi`: the readers, through NVML (`pip install 'attnbench[nvml]'`) or by parsing `nvidia-smi`;
- `read`: which reader, a judged snapshot of each GPU for env.json;
- `sample`: what a measurement records right after its timing, and the span of those samples over a run;
- `describe`: a state and a run's span in words, for doctor and the report;
- `energy`: NVML's energy counter, for energy per call.

Nothing here prints or gives advice (doctor does), and nothing imports a module above the package.
"""
