#!/bin/bash
# The image, with whichever container engine this machine has: Docker where its daemon answers, else podman (and
# buildah), installed from Debian's packages. `make image` and `make image-test` call this; tests/test_docker.py runs
# the container through it, so the flags below are the ones that were tested.
#
#   deploy/image.sh engine                  print docker or podman (installing podman where neither is usable)
#   deploy/image.sh build IMAGE [TORCH]     build IMAGE from the Dockerfile; TORCH=cuda (default) or cpu
#   deploy/image.sh run NAME IMAGE PORT DATA [ENV=VALUE...]
#                                           start the image as container NAME, the page on 127.0.0.1:PORT, DATA (a
#                                           host folder) as its /data, under deploy/seccomp-bwrap.json
#   deploy/image.sh CMD NAME ...            exec, logs, inspect, rm: passed to the engine as they are
#
# BASE (default debian:bookworm) is the image built FROM. Where it can be neither found locally nor pulled (a machine
# with no registry), a minimal Debian bookworm is made with debootstrap from DEBIAN_MIRROR and imported as
# localhost/debian-minbase:bookworm.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${BASE:-debian:bookworm}
LOCAL_BASE=localhost/debian-minbase:bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
APT=(apt-get); [ "$(id -u)" = 0 ] || APT=(sudo apt-get)

say() { echo "image.sh: $*" >&2; }

engine() {
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; return; fi
    if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
        say "no Docker daemon answers here: installing podman from Debian's packages"
        "${APT[@]}" update -qq
        # runc: the runtime podman is run with (see run below); uidmap, fuse-overlayfs: podman's storage and users.
        DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y -qq podman runc uidmap fuse-overlayfs >&2
    fi
    echo podman
}

# The base image: BASE itself where the engine has it or can pull it, else a Debian made here.
base_image() {
    local e=$1
    if $e image inspect "$BASE" >/dev/null 2>&1 || $e pull -q "$BASE" >/dev/null 2>&1; then echo "$BASE"; return; fi
    if ! $e image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        say "$BASE cannot be pulled: making $LOCAL_BASE with debootstrap from $DEBIAN_MIRROR"
        command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y -qq debootstrap >&2
        local rootfs
        rootfs=$(mktemp -d)
        debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >&2
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | $e import - "$LOCAL_BASE" >/dev/null
        rm -rf "$rootfs"
    fi
    echo "$LOCAL_BASE"
}

build() {
    local image=$1 torch=${2:-cuda} e base
    e=$(engine)
    base=$(base_image "$e")
    clean_from_host
    trap clean_from_host EXIT
    local ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
    if [ -f "$ca" ]; then cp "$ca" deploy/from-host/ca-certificates.crt; fi
    if [ "$torch" = cpu ]; then
        # The CPU build of the pinned torch for the image's Python (Debian bookworm's 3.11), from the CPU index or
        # wherever this machine's pip finds it; the build takes it from deploy/from-host/.
        local pin
        pin=$(sed -n 's/^torch==\([0-9.]*\).*/\1/p' requirements.txt)
        "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --abi cp311 \
            --implementation cp --platform manylinux_2_28_x86_64 --extra-index-url https://download.pytorch.org/whl/cpu \
            -d deploy/from-host "torch==$pin+cpu"
    fi
    say "building $image from $base (torch: $torch) with $e"
    if [ "$e" = docker ]; then
        docker build --build-arg BASE="$base" --build-arg TORCH="$torch" -t "$image" .
    else
        # chroot isolation: the RUN steps need no runtime or cgroups of their own; docker format keeps HEALTHCHECK.
        podman build --isolation=chroot --format=docker --build-arg BASE="$base" --build-arg TORCH="$torch" \
            -t "$image" .
    fi
}

clean_from_host() { find deploy/from-host -mindepth 1 ! -name README.md -delete; }

run() {
    local name=$1 image=$2 port=$3 data=$4 e
    shift 4
    e=$(engine)
    local args=(run -d --name "$name" --init -p "127.0.0.1:$port:7860" -v "$data:/data"
                --security-opt seccomp=deploy/seccomp-bwrap.json)
    local envs=()
    for kv in "$@"; do envs+=(-e "$kv"); done
    if [ "$e" = docker ]; then
        # Docker masks parts of /proc in a container, so the kernel refuses the sandbox a /proc of its own.
        args+=(--security-opt systempaths=unconfined)
        if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then args+=(--gpus all); fi
        docker "${args[@]}" "${envs[@]}" "$image"
    else
        # podman's name for the same /proc option; runc and explicit rlimits because crun and podman's default
        # rlimits are refused on hosts with hybrid cgroups and a low hard limit of open files.
        args+=(--security-opt "unmask=/proc/*" --ulimit nofile=4096:4096 --ulimit nproc=8192:8192)
        podman --runtime=runc "${args[@]}" "${envs[@]}" "$image"
    fi
}

cmd=${1:?usage: deploy/image.sh engine|build|run|exec|logs|inspect|rm ...}
shift
case $cmd in
    engine) engine ;;
    build) build "$@" ;;
    run) run "$@" ;;
    exec|logs|inspect|rm|stop)
        e=$(engine)
        if [ "$e" = podman ]; then exec podman --runtime=runc "$cmd" "$@"; else exec docker "$cmd" "$@"; fi ;;
    *) say "unknown command $cmd"; exit 2 ;;
esac
