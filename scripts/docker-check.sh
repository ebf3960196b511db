#!/usr/bin/env bash
# Build the CPU image from the Dockerfile and use it as a user would, with a Docker engine of its own.
#
#   scripts/docker-check.sh        (as root; .ci/run calls it after `make test`)
#   DOCKER_CHECK_OUT=DIR scripts/docker-check.sh    (also keeps the run's folder and log in DIR)
#   TORCH_CPU_FIND_LINKS=URL ...   (where the image's pip finds the CPU torch; default: see "torch" below)
#
# 1. Installs docker.io and debootstrap with apt-get when they are missing.
# 2. Starts a private dockerd: its own socket, data root, exec root and pidfile in a temporary folder, no
#    bridge and no iptables rules; it is stopped by its pid on exit, failure included.
# 3. Bootstraps Debian bookworm (python3, venv, g++ and Python's headers, as the CUDA devel image has) once:
#    the tarball is cached in ${XDG_CACHE_HOME:-~/.cache}/attnbench-docker, and imported as the base image.
# 4. Builds the Dockerfile on that base with GPU_KERNELS=no and a CPU torch (see "torch" below).
# 5. As a throwaway non-root host user: runs `attnbench run quick` into a bind-mounted folder that user owns,
#    then checks from the host that report.html and results.jsonl are that user's, readable by it, and
#    hold `ok` records; runs --help, suites and doctor, and holds doctor's exit code to its documentation.
# 6. Prints the image's size and the time each step took.
#
# Exit 0: every check passed. Exit 77: it cannot run on this machine (not root, no apt-get to install what
# is missing, or dockerd does not start here), with the reason; .ci/run reports that and moves on.
# Anything else: a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

SKIP=77
IMAGE=attnbench:cpu
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
dockerd_pid= http_pid= ci_user= data_tmpfs=

cleanup() {
    local rc=$?
    [ -z "$http_pid" ] || kill "$http_pid" 2>/dev/null || true
    if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
        step "stopping dockerd (pid $dockerd_pid) and removing $work"
        kill "$dockerd_pid"  # SIGTERM: dockerd stops its containers and its containerd, then exits
        for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$dockerd_pid" 2>/dev/null; then
            echo "dockerd $dockerd_pid did not stop in 30 s: killing it" >&2
            kill -9 "$dockerd_pid" 2>/dev/null || true
        fi
    fi
    [ -z "$ci_user" ] || userdel "$ci_user" 2>/dev/null || true
    # overlay mounts a killed dockerd may have left under the data root, before the folder goes
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    [ -z "$data_tmpfs" ] || umount -l "$work/data" 2>/dev/null || true
    rm -rf "$work"
    step "done (exit $rc)"
    exit "$rc"
}
trap cleanup EXIT

# ---- a private Docker engine --------------------------------------------------------------------------------
step "starting a private dockerd in $work"
mkdir -p "$work/data" "$work/exec"
# The data root (about 3 GB of layers at the end) goes on a tmpfs where memory allows: on this project's
# 2-core CI machine, deleting it from disk took longer (over a minute) than the build's layer commits saved.
if [ "$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)" -ge 12 ]; then
    mount -t tmpfs -o size=8g,mode=0711 attnbench-docker "$work/data" && data_tmpfs=1
fi
dockerd --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/docker.pid" -H "unix://$sock" \
        --iptables=false --bridge=none > "$work/dockerd.log" 2>&1 &
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
mkdir -p "$CACHE"
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
docker import "$tarball" attnbench-debian:bookworm >/dev/null
# The certificate authorities this host added itself (e.g. a TLS-intercepting proxy's) are trusted in the base
# too, so pip inside the build reaches the package index the way this host does.
mkdir -p "$work/base"
cp /usr/local/share/ca-certificates/*.crt "$work/base/" 2>/dev/null || true
{
    echo "FROM attnbench-debian:bookworm"
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
build_args=(--build-arg "TORCH_IMAGE=$BASE" --build-arg GPU_KERNELS=no)
if [ -n "${TORCH_CPU_FIND_LINKS:-}" ]; then
    build_args+=(--build-arg "TORCH_CPU_FIND_LINKS=$TORCH_CPU_FIND_LINKS")
elif python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$CACHE/wheels" "torch==$torch_version" > "$work/pip.log" 2>&1; then
    python3 - "$CACHE/wheels" "$work/http.port" 2>"$work/http.log" <<'EOF' &
import functools, http.server, os, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
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
    [ -z "${!proxy:-}" ] || build_args+=(--build-arg "$proxy")
done

# ---- build --------------------------------------------------------------------------------------------------
step "docker build ${build_args[*]} -t $IMAGE ."
docker build --network host "${build_args[@]}" -t "$IMAGE" . > "$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log"; fail "docker build (its last 40 lines are above)"; }
grep -q "GPU_KERNELS=no: FlashAttention 2 is not compiled" "$work/build.log" \
    || fail "the build did not skip compiling FlashAttention 2"
size=$(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1/1e9}')
step "built $IMAGE: $size (the data root holds $(du -sh "$work/data" 2>/dev/null | cut -f1))"

# ---- run it as a non-root host user -------------------------------------------------------------------------
ci_user=attnbench-ci-$$
useradd --system --no-create-home --shell /usr/sbin/nologin "$ci_user"
uid=$(id -u "$ci_user") gid=$(id -g "$ci_user")
as_user() { setpriv --reuid "$uid" --regid "$gid" --clear-groups "$@"; }
reports=$work/reports
mkdir "$reports" && chown "$uid:$gid" "$reports" && chmod 700 "$reports"
chmod 711 "$work"  # the user may pass through to its folder, and list nothing else

step "docker run --user $uid:$gid (host user $ci_user) -v $reports:/work/reports -v attnbench-cache:/cache $IMAGE run quick"
docker run --rm --network none --user "$uid:$gid" -v "$reports:/work/reports" -v attnbench-cache:/cache \
    "$IMAGE" run quick > "$work/quick.log" 2>&1 || { tail -n 30 "$work/quick.log"; fail "attnbench run quick exited non-zero"; }
grep -E "^(results|report|timed)" "$work/quick.log" || true

runs=("$reports"/quick-*)
[ ${#runs[@]} = 1 ] && [ -d "${runs[0]}" ] || fail "expected one quick-* run folder in $reports, found: ${runs[*]}"
for file in report.html results.jsonl; do
    path=${runs[0]}/$file
    [ -s "$path" ] || fail "$file is missing or empty"
    owner=$(stat -c %u:%g "$path")
    [ "$owner" = "$uid:$gid" ] || fail "$file belongs to $owner, not to $ci_user ($uid:$gid)"
    as_user head -c 1 "$path" >/dev/null || fail "$ci_user cannot read its own $file"
done
# read by the host user (root's python3 may live where that user cannot reach), parsed here
as_user cat "${runs[0]}/results.jsonl" > "$work/results.jsonl"
python3 - "$work/results.jsonl" <<'EOF' || fail "results.jsonl does not hold what a CPU quick run writes"
import collections, json, sys
records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
statuses = collections.Counter(r["status"] for r in records)
print(f"results.jsonl, read as the host user: {len(records)} records, {dict(statuses)}")
assert statuses["ok"] > 0, "no ok record"
bad = [r for r in records if r["status"] not in ("ok", "skipped")]
assert not bad, f"{len(bad)} records neither ok nor skipped, e.g. {bad[0]['backend']}: {bad[0].get('reason')}"
EOF
if [ -n "${DOCKER_CHECK_OUT:-}" ]; then  # keep the run to look at (the temporary folder goes at exit)
    mkdir -p "$DOCKER_CHECK_OUT" && cp -a "${runs[0]}" "$work/quick.log" "$DOCKER_CHECK_OUT/"
    step "kept ${runs[0]##*/} and quick.log in $DOCKER_CHECK_OUT"
fi
# The named volume took the image's world-writable /cache, so that uid could keep its caches there.
docker run --rm --network none --user "$uid:$gid" -v attnbench-cache:/cache --entrypoint sh "$IMAGE" \
    -c 'test -O /cache/attnbench && test -w /cache/attnbench' || fail "the run kept no cache in the attnbench-cache volume"

# ---- --help, suites, doctor with no other argument ----------------------------------------------------------
docker run --rm --network none "$IMAGE" --help > "$work/help.txt" || fail "attnbench --help exited non-zero"
grep -q "doctor" "$work/help.txt" || fail "--help does not list doctor"
docker run --rm --network none "$IMAGE" suites > "$work/suites.txt" || fail "attnbench suites exited non-zero"
grep -q "^quick " "$work/suites.txt" || fail "suites does not list quick"
# doctor's documented exit code: 0 when every backend of the default suite that exists for this device can
# run, 1 otherwise. On this CPU image those are the PyTorch backends, flex included (g++ and Python.h are in
# the base); the CUDA-only ones are n/a. So 0 is expected, and the JSON must agree backend by backend.
doctor_rc=0
docker run --rm --network none "$IMAGE" doctor --json > "$work/doctor.json" 2>"$work/doctor.err" || doctor_rc=$?
python3 - "$work/doctor.json" "$doctor_rc" <<'EOF' || { cat "$work/doctor.err"; fail "doctor"; }
import json, sys
text = open(sys.argv[1]).read()
report, rc = json.loads(text[text.index("{"):]), int(sys.argv[2])
default = [b for b in report["backends"] if b["in_default_suite"] and b["state"] != "n/a"]
blocked = [f"{b['name']}: {b['reason']}" for b in default if b["state"] != "ok"]
assert report["device"] == "cpu", report["device"]
assert not blocked, f"doctor finds default-suite backends that cannot run on this CPU image: {blocked}"
assert rc == 0 and report["healthy"], f"doctor exited {rc} (healthy={report['healthy']}) with every backend ok"
print(f"doctor exits 0 as documented: every backend of the default suite that exists for cpu can run "
      f"({', '.join(b['name'] for b in default)}); the CUDA-only ones are n/a")
EOF

step "all checks passed; image $IMAGE is $size"
