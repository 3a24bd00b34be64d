#!/usr/bin/env bash
# Runs the GPU tests on the lent H200 (device tool), with TileLang carried in by ../shared/device/pack-tilelang.sh:
#   carry [".device"], command: bash tests/gpu/run.sh [pytest args]
# Writes the full log to $OUT/gpu-tests.log and prints the summary last.
set -uo pipefail
[ -f /tmp/site/.unpacked ] || { mkdir -p /tmp/site && tar -xJf .device/site.tar.xz -C /tmp/site && touch /tmp/site/.unpacked; }
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export PLAYGROUND_CACHE_DIR=/tmp/playground-cache TILELANG_CACHE_DIR=/tmp/tilelang-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; python3 -c "import torch, tilelang; print('torch', torch.__version__, 'tilelang', tilelang.__version__)"; } 2>&1 | tee "$OUT/env.txt"
GPU_SUMMARY_FILE="$OUT/summary.json" python3 -m pytest -p no:cacheprovider -m gpu -v -s "$@" 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|^SUMMARY|^E  "
