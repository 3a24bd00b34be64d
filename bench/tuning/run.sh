#!/usr/bin/env bash
# Runs one tuning script on the lent H200 (device tool), TileLang carried in by ../shared/device/pack-tilelang.sh:
#   carry [".device"], command: bash bench/tuning/run.sh gemm_manual_ws.py [flash_attention_pingpong.py ...]
# Each script's whole output goes to $OUT/<script>.log; the table it prints last is shown.
set -uo pipefail
[ -f /tmp/site/.unpacked ] || { mkdir -p /tmp/site && tar -xJf .device/site.tar.xz -C /tmp/site && touch /tmp/site/.unpacked; }
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TILELANG_CACHE_DIR=/tmp/tilelang-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/env.txt"
for script in "$@"; do
  log="$OUT/${script%.py}.log"
  python3 "bench/tuning/$script" > "$log" 2>&1; echo "$script: exit $?"
  grep -v "INFO\|WARNING" "$log" | tail -40
done
