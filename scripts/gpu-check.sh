#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and driver (one command: `bash scripts/gpu-check.sh`).
# Runs the NVML backend's opt-in tests, prints `gantry gpus` (JSON and table) from NVML, and
# scrapes `gantry exporter --backend nvml` once, checking the dashboard's metrics are there.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
nvidia-smi -L || echo "note: nvidia-smi not found; continuing with NVML alone" >&2

echo "== NVML backend tests (feature nvml-tests, ignored tests included)"
cargo test -p gantry-gpu --features nvml-tests -- --include-ignored --nocapture --test-threads=1

echo "== gantry gpus --backend nvml"
cargo build -p gantry
./target/debug/gantry gpus --backend nvml -o json --samples 2
./target/debug/gantry gpus --backend nvml

echo "== one scrape of gantry exporter --backend nvml"
port="${GANTRY_CHECK_PORT:-19400}"
./target/debug/gantry exporter --backend nvml --listen "127.0.0.1:${port}" --interval-ms 500 &
exporter=$!
trap 'kill "$exporter" 2>/dev/null || true' EXIT
sleep 3
exec 3<>"/dev/tcp/127.0.0.1/${port}"
printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
body="$(cat <&3)"
printf '%s\n' "$body" | grep -E '^(DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_SM_CLOCK|DCGM_FI_DEV_FB_USED|DCGM_FI_PROF_PIPE_TENSOR_ACTIVE|gantry_gpu_health_state)\{' | head -40
missing=0
for m in DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_GPU_TEMP DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_FB_USED DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gantry_gpu_health_state; do
  grep -q "^${m}{" <<<"$body" || { echo "MISSING: ${m}" >&2; missing=1; }
done
exit "$missing"
