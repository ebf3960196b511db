"""What ships: the built wheel, installed alone, runs outside the checkout; the Dockerfile's pins agree with
pyproject's extras, the CLI starts without torch, packaged suites and the starter suite, and `doctor` telling the
truth on this machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version
from typer.testing import CliRunner

from attnbench.cli.main import app

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_the_wheel_installed_alone_runs_a_shard_outside_the_checkout() -> None:
    """scripts/check-package.sh with this Python: the wheel built from the checkout, installed into a fresh
    environment that borrows its dependencies, answers --version, list, suites, a shard of the packaged quick suite
    and recommend from outside the checkout (the script's own asserts say which step failed)."""
    proc = subprocess.run(["scripts/check-package.sh", sys.executable], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("wheel OK"), proc.stdout[-2000:]


def dockerfile_args() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    return {m[1]: m[2].strip('"') for m in re.finditer(r"^ARG (\w+)=(\S+)", text, re.M)}


def extra(name: str) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name: Requirement(r) for r in project["optional-dependencies"][name]}


# Each pinned build argument of the Dockerfile, and the extra (and distribution) it must satisfy.
PINNED_EXTRAS = {
    "FLASH_ATTN_VERSION": ("flash", "flash-attn"),
    "XFORMERS_VERSION": ("xformers", "xformers"),
    "FLASH_ATTN_4_VERSION": ("flash4", "flash-attn-4"),
    "CUTLASS_DSL_VERSION": ("flash4", "nvidia-cutlass-dsl"),
    "CUDNN_FRONTEND_VERSION": ("cudnn", "nvidia-cudnn-frontend"),
    "FLASHINFER_VERSION": ("flashinfer", "flashinfer-python"),
    "SAGEATTENTION_VERSION": ("sage", "sageattention"),
    "NVIDIA_ML_PY_VERSION": ("nvml", "nvidia-ml-py"),
}


def test_dockerfile_pins_satisfy_the_extras() -> None:
    args = dockerfile_args()
    for arg, (name, distribution) in PINNED_EXTRAS.items():
        assert extra(name)[distribution].specifier.contains(args[arg]), f"{arg}={args[arg]} against [{name}]"
    # the umbrella extra names every extra the image installs from wheels (flash-attn 2 compiles apart)
    umbrella = extra("gpu")["attnbench"].extras
    assert umbrella == {name for name, _ in PINNED_EXTRAS.values()} - {"flash"}, umbrella
    # the GPU image's torch is the build the pinned xformers wheel was made for (its cpp_lib.json says which)
    import xformers

    built = json.loads((Path(xformers.__file__).parent / "cpp_lib.json").read_text())["version"]
    assert xformers.__version__ == args["XFORMERS_VERSION"], "the tests' xformers is the pinned one"
    assert built["torch"] == args["TORCH_CUDA_VERSION"] + "+cu128" and built["cuda"] == 1208, built
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_req = next(Requirement(r) for r in project["dependencies"] if r.startswith("torch"))
    assert torch_req.specifier.contains(args["TORCH_CUDA_VERSION"])
    # the CPU image's torch (a +cpu local version) satisfies attnbench too
    assert torch_req.specifier.contains(args["TORCH_CPU_VERSION"]) and args["TORCH_CPU_VERSION"].endswith("+cpu")
    # cuda-python's major is the CUDA major it binds: 13.x needs a CUDA 13 driver, and torch's CUDA is 12.8
    assert Version(args["CUDA_PYTHON_VERSION"]).major == built["cuda"] // 100
    # the default base is the Debian release CI bootstraps the same base from (scripts/docker-check.sh)
    check = (ROOT / "scripts" / "docker-check.sh").read_text()
    assert args["BASE"] == "debian:bookworm" and "debootstrap --variant=minbase" in check and " bookworm " in check
    # FlashAttention 2 compiles only when asked: the default kernel set is the GPU one, from wheels
    assert args["KERNELS"] == "gpu" and args["FLASH_ATTN_2"] == "no"
    assert set(args["FLASH_ATTN_CUDA_ARCHS"].split(";")) >= {"80", "90"}, "Ampere and Hopper by default"
    # FlashInfer's compiler for its kernels built ahead (dropped from the image): nvcc and the runtime it links
    # statically are one CUDA release
    compiler, runtime = Version(args["CUDA_AOT_VERSION"]), Version(args["CUDA_AOT_RUNTIME_VERSION"])
    assert compiler.release[:2] == runtime.release[:2], (compiler, runtime)
    # a new pin cannot slip in unchecked
    unchecked = {name for name in args if name.endswith("_VERSION")} - set(PINNED_EXTRAS) - {
        "TORCH_CPU_VERSION", "TORCH_CUDA_VERSION", "CUDA_PYTHON_VERSION", "CUDA_AOT_VERSION",
        "CUDA_AOT_RUNTIME_VERSION"}
    assert not unchecked, f"pinned in the Dockerfile without a check here: {sorted(unchecked)}"


def test_the_docker_check_imports_every_library_the_gpu_image_pins() -> None:
    """scripts/docker-check.sh imports each kernel library in the built GPU image and holds its installed version to
    its pin: a library pinned in the Dockerfile but left out of that list would be carried unchecked."""
    check = (ROOT / "scripts" / "docker-check.sh").read_text()
    checked = set(re.findall(r'\("[\w.]+", "[\w-]+", "(\w+_VERSION)"\)', check))
    gpu_pins = {name for name in dockerfile_args() if name.endswith("_VERSION")} - {
        "TORCH_CPU_VERSION", "FLASH_ATTN_VERSION", "CUDA_AOT_VERSION", "CUDA_AOT_RUNTIME_VERSION"}  # not in the image
    assert checked == gpu_pins, (sorted(gpu_pins - checked), sorted(checked - gpu_pins))


def test_dockerfile_pins_have_recorded_signatures_and_flashinfers_conform(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The pinned kernel libraries are the versions whose signatures tests/signatures/ recorded, so the calls
    attnbench makes were held against exactly what the GPU image installs."""
    import importlib

    from attnbench.backends.conformance import check_backend
    from attnbench.backends.flashinfer import FlashInferBackend

    args = dockerfile_args()
    recorded = {path.stem for path in (ROOT / "tests" / "signatures").glob("*.py")}
    for prefix, arg in (("flash_attn_", "FLASH_ATTN_VERSION"), ("flash_attn_cute_", "FLASH_ATTN_4_VERSION"),
                        ("flashinfer_", "FLASHINFER_VERSION")):
        assert prefix + re.sub(r"\W", "_", args[arg]) in recorded, f"no recorded signatures for {arg}={args[arg]}"
    pinned = importlib.import_module("tests.signatures.flashinfer_" + re.sub(r"\W", "_", args["FLASHINFER_VERSION"]))
    monkeypatch.setitem(sys.modules, "flashinfer", pinned)
    conformance = check_backend(FlashInferBackend())
    called = len(FlashInferBackend().library_calls())  # every call the adapter makes, MLA's wrapper included
    assert conformance.state == "ok" and len(conformance.verdicts) == called == 14, conformance.summary


def test_dockerfile_runs_as_non_root_with_the_reports_volume() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 1000", text, re.M)
    assert 'VOLUME ["/work/reports"]' in text and 'ENTRYPOINT ["attnbench"]' in text
    assert "keep-torch" in text, "pip must not replace the image's torch"


def test_help_does_not_import_torch() -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "attnbench", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and "run" in proc.stdout
    imported = [line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")]


@pytest.mark.slow
def test_list_on_cpu_imports_no_compiler_stack_and_prints_no_library_warning() -> None:
    """`attnbench list` answers in about a second: torch, never dynamo or inductor (a second more each; flex's
    compiler check and sdpa-varlen's device check need neither). xformers (left out here: importing it pulls dynamo
    in) is imported without its six-line load warning when it is installed."""
    code = ("import sys; sys.modules['xformers'] = None; "
            "sys.argv = ['attnbench', 'list', '--device', 'cpu', '--fresh']\n"
            "from attnbench.cli.main import main\ntry: main()\nexcept SystemExit: pass\n"
            "print([m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    from torch._inductor import config

    from attnbench.backends.flex import inductor_cxx

    assert inductor_cxx() == tuple(config.cpp.cxx)  # the default read without inductor is inductor's own


@pytest.mark.slow
def test_xformers_load_warning_is_held_back() -> None:
    code = "from attnbench.backends.xformers_ops import XformersBackend; print(XformersBackend().availability('cpu'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-2000:]
    assert "WARNING[XFORMERS]" not in proc.stderr


@pytest.mark.slow
def test_packaged_suites_run_by_name_and_are_listed(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["suites"])
    assert result.exit_code == 0
    assert {line.split()[0] for line in result.output.splitlines()} >= {"quick", "long", "gpu-check"}
    validated = CliRunner().invoke(app, ["validate", "long", "--device", "cpu"])
    assert validated.exit_code == 0 and "12 cases on cpu" in validated.output


def test_init_writes_a_valid_starter_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    text = path.read_text()
    assert text.count("#") > 10, "the starter explains itself"
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0 and "cases on cpu" in checked.output
    path.write_text("mine")
    again = CliRunner().invoke(app, ["init", str(path)])
    assert again.exit_code == 2 and path.read_text() == "mine"


def test_doctor_on_this_cpu_machine_tells_the_truth() -> None:
    result = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    states = {b["name"]: b for b in report["backends"]}
    for name in ("naive", "sdpa", "sdpa-math", "sdpa-flash", "flex", "sliding-window"):
        assert states[name]["state"] == "ok", (name, states[name]["reason"])
    for name in ("sdpa-efficient", "sdpa-cudnn", "flash-attn", "flash-attn-3", "flash-attn-4", "xformers"):
        assert states[name]["state"] == "n/a", name
        assert "CUDA" in states[name]["reason"] or "cuda only" in states[name]["reason"]
    assert report["sdpa_kernels"] == {"flash": "no: CUDA only", "efficient": "no: CUDA only", "cudnn": "no: CUDA only"}
    assert report["environment"]["torch"] and report["healthy"] is True
    # conformance against the installed torch and xformers; flash-attn is not installed here
    conformance = {name: b["conformance"]["state"] for name, b in states.items()}
    assert conformance["sdpa"] == conformance["flex"] == conformance["xformers"] == "ok"
    assert conformance["naive"] == conformance["flash-attn"] == "n/a"
    assert states["flash-attn"]["conformance"]["summary"] == "n/a: flash-attn not installed"


def test_doctor_on_a_gpu_without_flash_attn_says_how_to_fix_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import attnbench.cli.doctor as doctor
    import attnbench.run.env as env

    monkeypatch.setattr(env, "collect_env", lambda device, torch_part=None: {"device": device})
    monkeypatch.setattr(doctor, "sdpa_kernel_usability", lambda device: {})
    diagnosis = doctor.diagnose("cuda")
    flash = next(b for b in diagnosis.backends if b.name == "flash-attn")
    assert flash.state == "missing" and flash.fix.startswith("pip install 'attnbench[flash]'")
    assert not diagnosis.healthy and "flash-attn" in {b.name for b in diagnosis.problems}
    assert any("not ready" in line and "flash-attn" in line for line in doctor.format_text(diagnosis))


@pytest.mark.slow
def test_decode_suite_is_packaged_one_query_over_a_kv_cache() -> None:
    from attnbench.sweep.suite import load_suite

    listed = CliRunner().invoke(app, ["suites"])
    assert "decode" in {line.split()[0] for line in listed.output.splitlines() if line.strip()}
    suite = load_suite(ROOT / "suites" / "decode.yaml")
    gpu, cpu = suite.cases("cuda"), suite.cases("cpu")
    assert {c.seq_len for c in gpu + cpu} == {1} and all(c.memory_bound for c in gpu + cpu)
    assert {c.kv_heads for c in gpu} == {1, 4, 8, 32} and {c.heads for c in gpu} == {32}
    assert min(c.kv_seq_len for c in gpu) == 1024 and max(c.kv_seq_len for c in gpu) == 131072
    assert len(cpu) == 18 and max(c.kv_seq_len for c in cpu) == 16384


def test_doctor_says_flex_cannot_build_cpu_kernels_without_a_compiler_or_python_h(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A container without g++ (or without Python.h) fails every flex case at compile time: doctor and the run's
    skip reason say so first, and doctor's exit code counts it (flex is in the default suite)."""
    import sysconfig

    from torch._inductor import config

    import attnbench.backends.flex as flex
    import attnbench.cli.doctor as doctor

    def flex_health() -> tuple[str, str | None, bool]:
        flex.cpu_build_tools_missing.cache_clear()
        diagnosis = doctor.diagnose("cpu")
        state = next(b for b in diagnosis.backends if b.name == "flex")
        return state.state, state.reason, diagnosis.healthy

    monkeypatch.setattr(doctor, "sdpa_kernel_usability", lambda device: {})
    try:
        assert flex_health() == ("ok", None, True)  # this machine has both
        with config.patch({"cpp.cxx": (None, "no-such-g++")}):
            state, reason, healthy = flex_health()
        assert state == "missing" and not healthy
        assert reason == ("needs a C++ compiler for torch.compile's CPU kernels (no-such-g++ not found; "
                          "install g++ or set CXX)")
        real_get_path = sysconfig.get_path
        monkeypatch.setattr(sysconfig, "get_path", lambda name, *a, **k: str(tmp_path) if name == "include"
                            else real_get_path(name, *a, **k))
        state, reason, healthy = flex_health()
        assert state == "missing" and not healthy and reason is not None
        assert f"no Python.h in {tmp_path}" in reason and "python3-dev" in reason
    finally:
        monkeypatch.undo()
        flex.cpu_build_tools_missing.cache_clear()
