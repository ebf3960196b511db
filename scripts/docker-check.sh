#!/usr/bin/env bash
# Build both images from the one Dockerfile and use them as a user would, with a Docker engine of its own.
#
#   scripts/docker-check.sh        (as root; .ci/run calls it after `make test`)
#   DOCKER_CHECK_OUT=DIR scripts/docker-check.sh    (also keeps the runs' folders and logs in DIR)
#   TORCH_CPU_FIND_LINKS=URL ...   (where the CPU image's pip finds the CPU torch; default: see "torch" below)
#   DOCKER_CHECK_ROOT=DIR ...      (the engine's data root, kept between runs; default: under the cache below)
#   DOCKER_CHECK_GPU=no ...        (the CPU image alone: a cold GPU build takes 14 min on 2 shared cores)
#   DOCKER_CHECK_FLASHINFER_AOT="9.0a 10.0a" ...  (the GPU image's FLASHINFER_AOT, default 9.0a: FlashInfer's
#                                  kernels built ahead for these archs, doctor held to them; empty: none, `absent`)
#   DOCKER_CHECK_FLASHINFER_AOT_ONLY= ...  (its FLASHINFER_AOT_ONLY, default batch_decode: the two decode modules
#                                  of gpu-check alone, 70 s on 2 cores, the rest reported missing; empty: all 5)
#
# 1. Installs docker.io and debootstrap with apt-get when they are missing.
# 2. Starts a private dockerd: its own socket, exec root and pidfile, no bridge and no iptables rules; it is
#    stopped by its pid on exit, failure included. Its data root is kept between runs (the layer cache: the
#    GPU image's 6 GB of CUDA wheels are downloaded once, and again only when a pin changes); a lock makes a
#    second check wait for the first, and a dockerd a killed check left running is stopped by its pidfile.
# 3. Bootstraps Debian bookworm (python3, venv, g++ and Python's headers) once: the tarball is cached in
#    ${XDG_CACHE_HOME:-~/.cache}/attnbench-docker, and imported as the base image.
# 4. Builds the CPU image (KERNELS=cpu, a CPU torch: see "torch" below) on that base, and checks it holds no
#    GPU kernel library.
# 5. As a throwaway non-root host user: runs `attnbench run quick` into a bind-mounted folder that user owns,
#    then checks from the host that report.html and results.jsonl are that user's, readable by it, and
#    hold `ok` records; runs --help, suites and doctor, and holds doctor's exit code to its documentation.
# 6. Builds the GPU image (KERNELS=gpu: PyPI's CUDA torch and every kernel library of the `gpu` extra) on the
#    same base, and in it, without a GPU: checks flash-attn-4 is in its own directory (no `flash_attn` in the
#    venv for xformers' probe to take for FlashAttention 2), imports every kernel library in attnbench's order
#    and holds each version to its pin, checks `doctor` reports each carried library installed, importable and
#    conforming to its signatures, FlashAttention 2 as not carried and FlashInfer's kernels as built ahead, that
#    `list` shows every backend, and runs `attnbench run suites/quick.yaml` on the CPU as in 5.
# 7. Prints each image's size, the time each step took, and how many build steps came from the layer cache.
#
# Exit 0: every check passed. Exit 77: it cannot run on this machine (not root, no apt-get to install what
# is missing, or dockerd does not start here), with the reason; .ci/run reports that and moves on.
# Anything else: a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

SKIP=77
IMAGE=attnbench:cpu
GPU_IMAGE=attnbench:gpu
BASE=attnbench-base:bookworm
# What the base needs beyond minbase: Python with venv (the Dockerfile makes one), and g++ with Python.h,
# which torch.compile's CPU kernels (flex) are built with.
DEBIAN_PACKAGES=python3,python3-venv,python3-dev,g++,ca-certificates
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/attnbench-docker

started=$(date +%s)
step() { printf '[docker-check %4ds] %s\n' "$(( $(date +%s) - started ))" "$*"; }
skip() { echo "docker check skipped: $*" >&2; exit "$SKIP"; }
fail() { echo "docker check FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "it needs root (a private dockerd, debootstrap, a throwaway user); running as $(id -un)"
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || skip "${missing[*]} missing, and no apt-get to install them"
    step "installing ${missing[*]}"
    apt_log=$(mktemp)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } > "$apt_log" 2>&1; then
        tail -n 5 "$apt_log" >&2
        skip "apt-get could not install ${missing[*]} (its last lines are above)"
    fi
    rm -f "$apt_log"
fi

work=$(mktemp -d /tmp/attnbench-docker.XXXXXX)
sock=$work/docker.sock
export DOCKER_HOST=unix://$sock
data_root=${DOCKER_CHECK_ROOT:-$CACHE/docker-root}
pidfile=$CACHE/dockerd.pid
volume=attnbench-cache-$$  # the run's cache volume, this check's alone, removed at exit
dockerd_pid= http_pid= ci_user=

cleanup() {
    local rc=$?
    [ -z "$http_pid" ] || kill "$http_pid" 2>/dev/null || true
    if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
        # the layers stay (the next check's cache); what this run made and nothing names goes
        docker volume rm -f "$volume" >/dev/null 2>&1 || true
        docker image prune -f >/dev/null 2>&1 || true
        step "stopping dockerd (pid $dockerd_pid); its data root $data_root holds $(du -sh "$data_root" 2>/dev/null | cut -f1)"
        kill "$dockerd_pid"  # SIGTERM: dockerd stops its containers and its containerd, then exits
        for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$dockerd_pid" 2>/dev/null; then
            echo "dockerd $dockerd_pid did not stop in 30 s: killing it" >&2
            kill -9 "$dockerd_pid" 2>/dev/null || true
        fi
        # overlay mounts a killed dockerd may have left (no container runs once it is gone)
        grep -o -e " $work/[^ ]*" -e " $data_root/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    fi
    [ -z "$ci_user" ] || userdel "$ci_user" 2>/dev/null || true
    rm -rf "$work"
    step "done (exit $rc)"
    exit "$rc"
}
trap cleanup EXIT

# ---- a private Docker engine --------------------------------------------------------------------------------
# One engine at a time on the kept data root: a second check waits here for the first (up to an hour).
mkdir -p "$CACHE" "$data_root" "$work/exec"
exec 9> "$CACHE/docker-root.lock"
if ! flock -n 9; then
    step "another docker check holds $CACHE/docker-root.lock: waiting for it"
    flock -w 3600 9 || fail "another docker check held $CACHE/docker-root.lock for an hour"
fi
# A check killed before its trap ran leaves its dockerd running on the data root: stop that one, by its pid.
if [ -s "$pidfile" ] && old=$(cat "$pidfile") && kill -0 "$old" 2>/dev/null \
        && tr '\0' ' ' < "/proc/$old/cmdline" | grep -q -- "--data-root $data_root "; then
    step "stopping the dockerd (pid $old) a killed check left on $data_root"
    kill "$old"
    for _ in $(seq 60); do kill -0 "$old" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$old" 2>/dev/null && fail "the dockerd (pid $old) a killed check left on $data_root does not stop"
fi
rm -f "$pidfile"
step "starting a private dockerd (data root $data_root, kept between runs; the rest in $work)"
# 9>&-: the engine does not inherit the lock, so a killed check never leaves it held. nice: its builds and
# containers yield to the machine's other work.
nice -n 10 dockerd --data-root "$data_root" --exec-root "$work/exec" --pidfile "$pidfile" -H "unix://$sock" \
        --iptables=false --bridge=none > "$work/dockerd.log" 2>&1 9>&- &
dockerd_pid=$!
for _ in $(seq 60); do
    docker version >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
done
if ! docker version >/dev/null 2>&1; then
    tail -n 5 "$work/dockerd.log" >&2
    skip "dockerd did not start here (its last log lines are above)"
fi
# `docker build` here: the classic builder, unless BuildKit is set up (the Dockerfile works with either)
step "dockerd $(docker version --format '{{.Server.Version}}') up (pid $dockerd_pid)"

# ---- the base image: Debian bookworm, bootstrapped once ----------------------------------------------------
tarball=$CACHE/debian-bookworm-$(printf '%s %s' "$DEBIAN_PACKAGES" "$DEBIAN_MIRROR" | sha256sum | cut -c1-12).tar
if [ ! -s "$tarball" ]; then
    step "debootstrap bookworm ($DEBIAN_PACKAGES) from $DEBIAN_MIRROR"
    debootstrap --variant=minbase --include="$DEBIAN_PACKAGES" bookworm "$work/rootfs" "$DEBIAN_MIRROR" \
        > "$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; fail "debootstrap failed"; }
    rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
    tar -C "$work/rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$work/rootfs"
else
    step "reusing $tarball"
fi
# Imported once per tarball: a second import would be a new image, and every layer built on it a cache miss.
debian=attnbench-debian:$(basename "$tarball" .tar)
docker image inspect "$debian" >/dev/null 2>&1 || docker import "$tarball" "$debian" >/dev/null
# The certificate authorities this host added itself (e.g. a TLS-intercepting proxy's) are trusted in the base
# too, so pip inside the build reaches the package index the way this host does.
mkdir -p "$work/base"
cp /usr/local/share/ca-certificates/*.crt "$work/base/" 2>/dev/null || true
{
    echo "FROM $debian"
    if compgen -G "$work/base/*.crt" >/dev/null; then
        echo "COPY *.crt /usr/local/share/ca-certificates/"
        echo "RUN update-ca-certificates"
    fi
} > "$work/base/Dockerfile"
docker build -q -t "$BASE" "$work/base" >/dev/null 2>"$work/base.log" || { cat "$work/base.log"; fail "base image"; }
step "base image $BASE: $(docker image inspect --format '{{.Size}}' "$BASE" | awk '{printf "%.0f MB", $1/1e6}')"

# ---- torch --------------------------------------------------------------------------------------------------
# The image installs TORCH_CPU_VERSION from TORCH_CPU_FIND_LINKS. PyPI has no CPU build (its torch is the
# multi-GB CUDA one), so unless TORCH_CPU_FIND_LINKS is set, this host's pip fetches the wheel for the base's
# Python (bookworm: CPython 3.11) wherever its own configuration finds it, and it is served to the build over
# 127.0.0.1 (the build uses the host's network). If this host's pip cannot, the Dockerfile's default applies.
torch_version=$(sed -n 's/^ARG TORCH_CPU_VERSION=//p' Dockerfile)
build_args=(--build-arg "BASE=$BASE" --build-arg KERNELS=cpu)
proxy_args=()
if [ -n "${TORCH_CPU_FIND_LINKS:-}" ]; then
    build_args+=(--build-arg "TORCH_CPU_FIND_LINKS=$TORCH_CPU_FIND_LINKS")
elif python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$CACHE/wheels" "torch==$torch_version" > "$work/pip.log" 2>&1; then
    python3 - "$CACHE/wheels" "$work/http.port" 2>"$work/http.log" <<'EOF' &
import functools, http.server, os, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
try:  # one port from run to run, so the address (a build argument) keeps the torch layer cached
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 47391), handler)
except OSError:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
with open(sys.argv[2] + ".part", "w") as f:
    f.write(str(server.server_port))
os.replace(sys.argv[2] + ".part", sys.argv[2])
server.serve_forever()
EOF
    http_pid=$!
    for _ in $(seq 50); do [ -s "$work/http.port" ] && break; sleep 0.1; done
    [ -s "$work/http.port" ] || fail "the local wheel server did not start: $(cat "$work/http.log")"
    build_args+=(--build-arg "TORCH_CPU_FIND_LINKS=http://127.0.0.1:$(cat "$work/http.port")/")
    step "torch $torch_version from this host's pip ($(ls "$CACHE/wheels"), served on 127.0.0.1)"
else
    step "this host's pip has no torch==$torch_version wheel for CPython 3.11: the Dockerfile's default index"
fi
for proxy in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
    [ -z "${!proxy:-}" ] || proxy_args+=(--build-arg "$proxy")
done

# ---- build --------------------------------------------------------------------------------------------------
# build IMAGE ARG...: the Dockerfile built as IMAGE, timed; prints how many steps the layer cache answered.
build() {
    local image=$1 log=$work/build-${1//[^a-z]/-}.log t0
    shift
    t0=$(date +%s)
    step "docker build $* -t $image ."
    docker build --network host "$@" "${proxy_args[@]}" -t "$image" . > "$log" 2>&1 \
        || { tail -n 40 "$log"; fail "docker build of $image (its last 40 lines are above)"; }
    size=$(docker image inspect --format '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1/1e9}')
    step "built $image in $(( $(date +%s) - t0 )) s ($(grep -c -e 'Using cache' -e ' CACHED' "$log") of" \
         "$(grep -c -e '^Step ' -e '^#[0-9]* \[' "$log") steps from the layer cache): $size"
}
# installed IMAGE DISTRIBUTION...: each as name==version, or "name not installed", in IMAGE
installed() {
    local image=$1
    shift
    # as attnbench sees them: with the directory flash-attn-4 has of its own in the GPU image on sys.path
    docker run --rm --network none --entrypoint python "$image" -c 'import importlib.metadata as m, sys
from attnbench.backends.layout import add_flash_attn_4_path
add_flash_attn_4_path()
for name in sys.argv[1:]:
    try: print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError: print(f"{name} not installed")' "$@"
}
KERNEL_DISTRIBUTIONS=(torch flash-attn xformers flash-attn-4 nvidia-cutlass-dsl nvidia-cudnn-frontend
                      flashinfer-python cuda-python sageattention nvidia-ml-py)
build "$IMAGE" "${build_args[@]}"
cpu_size=$size
installed "$IMAGE" "${KERNEL_DISTRIBUTIONS[@]}" > "$work/cpu-installed.txt"
grep -qx "torch==$torch_version" "$work/cpu-installed.txt" || fail "$IMAGE: $(grep ^torch "$work/cpu-installed.txt"), not $torch_version"
gpu_only=$(grep -v -e '^torch==' -e '^nvidia-ml-py==' -e ' not installed$' "$work/cpu-installed.txt" || true)
[ -z "$gpu_only" ] || fail "the CPU image holds GPU kernel libraries: $gpu_only"
step "$IMAGE: torch $torch_version, NVML, and none of the GPU kernel libraries"

# ---- run it as a non-root host user -------------------------------------------------------------------------
ci_user=attnbench-ci-$$
useradd --system --no-create-home --shell /usr/sbin/nologin "$ci_user"
uid=$(id -u "$ci_user") gid=$(id -g "$ci_user")
as_user() { setpriv --reuid "$uid" --regid "$gid" --clear-groups "$@"; }
chmod 711 "$work"  # the user may pass through to its folders, and list nothing else

# run_quick IMAGE SUITE: `attnbench run SUITE` in IMAGE as that user, into a folder of its own bind-mounted on
# /work/reports, with this check's cache volume on /cache; then the run's files checked from the host.
run_quick() {
    local image=$1 suite=$2 name=${1//[^a-z]/-}
    local reports=$work/reports-$name log=$work/quick-$name.log runs
    mkdir "$reports" && chown "$uid:$gid" "$reports" && chmod 700 "$reports"
    step "docker run --user $uid:$gid (host user $ci_user) -v $reports:/work/reports -v $volume:/cache $image run $suite"
    docker run --rm --network none --user "$uid:$gid" -v "$reports:/work/reports" -v "$volume:/cache" \
        "$image" run "$suite" > "$log" 2>&1 || { tail -n 30 "$log"; fail "$image: attnbench run $suite exited non-zero"; }
    grep -E "^(results|report|timed)" "$log" || true
    runs=("$reports"/quick-*)
    [ ${#runs[@]} = 1 ] && [ -d "${runs[0]}" ] || fail "expected one quick-* run folder in $reports, found: ${runs[*]}"
    for file in report.html results.jsonl; do
        path=${runs[0]}/$file
        [ -s "$path" ] || fail "$image: $file is missing or empty"
        owner=$(stat -c %u:%g "$path")
        [ "$owner" = "$uid:$gid" ] || fail "$image: $file belongs to $owner, not to $ci_user ($uid:$gid)"
        as_user head -c 1 "$path" >/dev/null || fail "$image: $ci_user cannot read its own $file"
    done
    # read by the host user (root's python3 may live where that user cannot reach), parsed here
    as_user cat "${runs[0]}/results.jsonl" > "$work/results-$name.jsonl"
    python3 - "$work/results-$name.jsonl" <<'EOF' || fail "$image: results.jsonl does not hold what a CPU quick run writes"
import collections, json, sys
records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
statuses = collections.Counter(r["status"] for r in records)
print(f"results.jsonl, read as the host user: {len(records)} records, {dict(statuses)}")
assert statuses["ok"] > 0, "no ok record"
bad = [r for r in records if r["status"] not in ("ok", "skipped")]
assert not bad, f"{len(bad)} records neither ok nor skipped, e.g. {bad[0]['backend']}: {bad[0].get('reason')}"
EOF
    if [ -n "${DOCKER_CHECK_OUT:-}" ]; then  # keep the run to look at (the temporary folder goes at exit)
        mkdir -p "$DOCKER_CHECK_OUT/$name" && cp -a "${runs[0]}" "$log" "$DOCKER_CHECK_OUT/$name/"
        step "kept ${runs[0]##*/} and its log in $DOCKER_CHECK_OUT/$name"
    fi
}

# check_cli IMAGE: --help, suites, and doctor --json (kept as $work/doctor-NAME.json) with no other argument.
# doctor's documented exit code: 0 when every backend of the default suite that exists for this device can
# run, 1 otherwise. On the CPU those are the PyTorch backends, flex included (g++ and Python.h are in the
# base); the CUDA-only ones are n/a. So 0 is expected, and the JSON must agree backend by backend.
check_cli() {
    local image=$1 name=${1//[^a-z]/-} doctor_rc=0
    docker run --rm --network none "$image" --help > "$work/help.txt" || fail "$image: attnbench --help exited non-zero"
    grep -q "doctor" "$work/help.txt" || fail "$image: --help does not list doctor"
    docker run --rm --network none "$image" suites > "$work/suites.txt" || fail "$image: attnbench suites exited non-zero"
    grep -q "^quick " "$work/suites.txt" || fail "$image: suites does not list quick"
    docker run --rm --network none "$image" doctor --json > "$work/doctor-$name.json" 2>"$work/doctor.err" || doctor_rc=$?
    python3 - "$work/doctor-$name.json" "$doctor_rc" <<'EOF' || { cat "$work/doctor.err"; fail "$image: doctor"; }
import json, sys
text = open(sys.argv[1]).read()
report, rc = json.loads(text[text.index("{"):]), int(sys.argv[2])
default = [b for b in report["backends"] if b["in_default_suite"] and b["state"] != "n/a"]
blocked = [f"{b['name']}: {b['reason']}" for b in default if b["state"] != "ok"]
assert report["device"] == "cpu", report["device"]
assert not blocked, f"doctor finds default-suite backends that cannot run on the CPU: {blocked}"
assert rc == 0 and report["healthy"], f"doctor exited {rc} (healthy={report['healthy']}) with every backend ok"
print(f"doctor exits 0 as documented: every backend of the default suite that exists for cpu can run "
      f"({', '.join(b['name'] for b in default)}); the CUDA-only ones are n/a")
EOF
}

run_quick "$IMAGE" quick
# The named volume took the image's world-writable /cache, so that uid could keep its caches there.
docker run --rm --network none --user "$uid:$gid" -v "$volume:/cache" --entrypoint sh "$IMAGE" \
    -c 'test -O /cache/attnbench && test -w /cache/attnbench' || fail "the run kept no cache in the $volume volume"
check_cli "$IMAGE"
step "the CPU image's checks passed; $IMAGE is $cpu_size"

# ---- the GPU image: the same Dockerfile, KERNELS=gpu, on the same base ------------------------------------
case "${DOCKER_CHECK_GPU:-yes}" in
    yes) ;;
    no) step "DOCKER_CHECK_GPU=no: the GPU image is not built; all checks passed; $IMAGE is $cpu_size"; exit 0 ;;
    *) fail "DOCKER_CHECK_GPU must be yes or no, not '${DOCKER_CHECK_GPU}'" ;;
esac
fi_aot=${DOCKER_CHECK_FLASHINFER_AOT-9.0a} fi_only=${DOCKER_CHECK_FLASHINFER_AOT_ONLY-batch_decode}
build "$GPU_IMAGE" --build-arg "BASE=$BASE" --build-arg KERNELS=gpu --build-arg "FLASHINFER_AOT=$fi_aot" \
    --build-arg "FLASHINFER_AOT_ONLY=$fi_only"
[ -z "$fi_aot" ] || grep -e "FlashInfer's kernels for" -e " compiled " "$work/build-${GPU_IMAGE//[^a-z]/-}.log" \
    | sed 's/^#[0-9]* [0-9.]* /  /' | cut -c1-200 || true
gpu_size=$size
# Every kernel library imported, with no GPU and no driver; each version held to its pin in the Dockerfile.
# First the layout (attnbench/backends/layout.py): flash-attn-4 lives in a directory of its own, so a plain Python
# finds no `flash_attn` (xformers' probe for FlashAttention 2 would take flash-attn-4's namespace package for it).
docker run --rm --network none --entrypoint python "$GPU_IMAGE" -c "$(cat <<'EOF'
import importlib.util, os
spec = importlib.util.find_spec("flash_attn")
path = os.environ["ATTNBENCH_FLASH_ATTN_4_PATH"]
assert spec is None, f"flash_attn is findable outside {path}: {list(spec.submodule_search_locations or [spec.origin])}"
assert os.path.isfile(os.path.join(path, "flash_attn", "cute", "__init__.py")), f"no flash_attn/cute in {path}"
print(f"  layout: no flash_attn in the venv; flash-attn-4's flash_attn/cute in {path} (ATTNBENCH_FLASH_ATTN_4_PATH)")
EOF
)" || fail "$GPU_IMAGE: flash-attn-4 is not where the Dockerfile puts it (above)"
pins=$(sed -n 's/^ARG \([A-Z0-9_]*_VERSION\)=\(.*\)$/\1=\2/p' Dockerfile | tr '\n' ' ')
docker run --rm --network none -e "PINS=$pins" --entrypoint python "$GPU_IMAGE" -c "$(cat <<'EOF'
import importlib, importlib.metadata as metadata, json, os, re, sys
from attnbench.backends.layout import add_flash_attn_4_path
# as attnbench does: xformers.ops imported first, then flash-attn-4's directory appended to sys.path
add_flash_attn_4_path()
pins = dict(pair.split("=", 1) for pair in os.environ["PINS"].split())
# (module, distribution, its pin in the Dockerfile)
libraries = [("torch", "torch", "TORCH_CUDA_VERSION"), ("xformers.ops", "xformers", "XFORMERS_VERSION"),
             ("flash_attn.cute", "flash-attn-4", "FLASH_ATTN_4_VERSION"),
             ("cutlass", "nvidia-cutlass-dsl", "CUTLASS_DSL_VERSION"),
             ("cudnn", "nvidia-cudnn-frontend", "CUDNN_FRONTEND_VERSION"),
             ("flashinfer", "flashinfer-python", "FLASHINFER_VERSION"),
             ("cuda.bindings.driver", "cuda-python", "CUDA_PYTHON_VERSION"),
             ("sageattention", "sageattention", "SAGEATTENTION_VERSION"), ("pynvml", "nvidia-ml-py", "NVIDIA_ML_PY_VERSION")]
# An import may fail only for want of the driver this machine lacks; every failure's reason is printed.
NO_DRIVER = re.compile(r"libcuda\.so|CUDA driver|no NVIDIA driver|Found no NVIDIA|CUDA_ERROR_NO_DEVICE|cuInit", re.I)
failures = []
for module, distribution, pin in libraries:
    version = metadata.version(distribution)
    if version.split("+")[0] != pins[pin]:
        failures.append(f"{distribution} {version}, pinned {pin}={pins[pin]}")
    try:
        importlib.import_module(module)
        verdict = "imported"
    except Exception as exc:  # the reason is the record
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if NO_DRIVER.search(reason):
            verdict = f"cannot import without a driver ({reason})"
        else:
            verdict = f"IMPORT FAILED ({reason})"
            failures.append(f"import {module}: {reason}")
    print(f"  {distribution:<22} {version:<14} import {module}: {verdict}")
import torch
built = json.load(open(os.path.join(os.path.dirname(importlib.util.find_spec("xformers").origin), "cpp_lib.json")))
print(f"  torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
      f"xformers built for torch {built['version']['torch']}; torch.cuda.is_available() = {torch.cuda.is_available()}")
if built["version"]["torch"] != torch.__version__:
    failures.append(f"xformers was built for torch {built['version']['torch']}, the image has {torch.__version__}")
# each is what it says: xformers' flash operator is PyTorch's own FlashAttention 2, flash_attn.cute is flash-attn-4's
if "xformers.ops" in sys.modules:
    flash = sys.modules["xformers.ops.fmha.flash"]
    print(f"  xformers' flash operator: FlashAttention {flash.FLASH_VERSION}, "
          f"{'PyTorch' if flash._USE_PT_FLASH_ATTN else 'flash_attn'}'s")
    if not flash._USE_PT_FLASH_ATTN or flash.FLASH_VERSION == "0.0.0":
        failures.append(f"xformers' flash operator is not PyTorch's ({flash.FLASH_VERSION}, {flash._USE_PT_FLASH_ATTN})")
if "flash_attn.cute" in sys.modules:
    cute = sys.modules["flash_attn.cute"].__file__
    owned = any(str(f) == "flash_attn/cute/__init__.py" for f in metadata.distribution("flash-attn-4").files or [])
    print(f"  flash_attn.cute: {cute} (flash-attn-4's own file: {owned})")
    if not cute.startswith(os.environ["ATTNBENCH_FLASH_ATTN_4_PATH"]) or not owned:
        failures.append(f"flash_attn.cute is {cute}, not flash-attn-4's in {os.environ['ATTNBENCH_FLASH_ATTN_4_PATH']}")
sys.exit("\n".join(failures) or None)
EOF
)" || fail "$GPU_IMAGE: a kernel library is missing, unpinned or cannot be imported (above)"
check_cli "$GPU_IMAGE"
# doctor: each GPU library with its pinned version and its signature conformance against attnbench's calls
docker run --rm --network none -e COLUMNS=200 "$GPU_IMAGE" list --device cpu > "$work/list.txt" || fail "$GPU_IMAGE: attnbench list exited non-zero"
python3 - "$work/doctor-${GPU_IMAGE//[^a-z]/-}.json" "$work/list.txt" "$fi_aot" "$fi_only" <<'EOF' || fail "$GPU_IMAGE: doctor or list"
import json, sys
text = open(sys.argv[1]).read()
report = json.loads(text[text.index("{"):])
backends = {b["name"]: b for b in report["backends"]}
listed = {line.split()[1] for line in open(sys.argv[2]) if line.startswith("│") and line.split()[1] != "│"}
assert set(backends) <= listed, f"attnbench list leaves out {sorted(set(backends) - listed)}"
# every GPU backend whose library the image carries: installed, importable (on the CPU its only reason is that it
# needs CUDA), and its calls conform to the installed signatures
CANNOT = ("not installed", "cannot be imported", "cannot import", "does not import")
for name in ("xformers", "flash-attn-4", "cudnn", "cudnn-fp8", "flashinfer", "sage"):
    b = backends[name]
    assert b["version"], f"{name}: doctor finds {b['library']} not installed"
    assert not any(c in (b["reason"] or "") for c in CANNOT), f"{name}: {b['reason']}"
    assert b["conformance"]["state"] == "ok", f"{name}: {b['library']} {b['version']}: {b['conformance']['summary']}"
    print(f"  {name:<13} {b['library']} {b['version']}: {b['state']} on cpu ({b['reason']}); "
          f"conformance {b['conformance']['summary'][:100]}")
# FlashAttention 2 is not carried (FLASH_ATTN_2=no), and doctor says so
fa2 = backends["flash-attn"]
assert fa2["version"] is None and "not carried by this image" in (fa2["reason"] or ""), fa2
print(f"  flash-attn    {fa2['reason'][:200]}")
# FlashInfer's kernels, the files a first call would load: no release on PyPI carries precompiled kernels for the
# calls attnbench makes (flashinfer-jit-cache is published on flashinfer.ai's own index only) and the image has no
# nvcc, so doctor must say there are none; if that changes, this check fails and docs/docker.md is corrected.
# Built with FLASHINFER_AOT, each of its archs has every module the shipped suites' cases need (scripts/flashinfer_aot.py's
# manifest, each library there), and the compiler is gone.
kernels = backends["flashinfer"]["kernels"]
print(f"  flashinfer    kernels {kernels['state']}: {kernels['summary']}")
assert kernels["nvcc"] is None, kernels
if sys.argv[3]:
    ahead = {a["arch"]: a for a in kernels["built_ahead"]}
    assert kernels["state"] == "precompiled" and set(ahead) == set(sys.argv[3].split()), kernels
    only = sys.argv[4]
    assert all(a["modules"] and (only or not a["missing"]) and a["modules"] > len(a["missing"])
               and not any(only in name for name in a["missing"]) for a in ahead.values()), kernels
else:
    assert kernels["state"] == "absent" and kernels["precompiled"] == 0, kernels
    assert "no nvcc" in kernels["summary"] and "flashinfer-jit-cache" in kernels["summary"], kernels
print(f"attnbench list shows all {len(backends)} backends doctor knows")
EOF
run_quick "$GPU_IMAGE" suites/quick.yaml
step "the GPU image's checks passed; $GPU_IMAGE is $gpu_size (run on the CPU: this machine has no GPU)"
step "all checks passed; $IMAGE is $cpu_size, $GPU_IMAGE is $gpu_size"
