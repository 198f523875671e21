#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and driver (one command: `bash scripts/gpu-check.sh`).
# 1. the NVML backend's opt-in tests; 2. `gantry gpus` (JSON and table) from NVML; 3. one scrape
# of `gantry exporter --backend nvml` while a GPU is busy, checking the dashboard's metrics and a
# non-zero utilisation; 4. `gantry up` on the real GPUs: a job that uses a GPU runs there and its
# process is attributed to it in the metrics.
#
# With cargo on the machine it builds what it needs. Without (a GPU machine with no Rust), set
# GANTRY_PREBUILT to a folder holding `gantry` and `gpu-tests` (the gantry-gpu integration test
# binary built with `--features nvml-tests`), built on a machine of the same architecture:
#   cargo build -p gantry && cargo test -p gantry-gpu --features nvml-tests --no-run
# and copy target/debug/gantry and the `it-*` test executable it names.
# Stripped, the two are ~62 MiB (kube-rs included); where a transfer limit bites, gzip them and
# `gunzip "$GANTRY_PREBUILT"/*.gz` before running (18 MiB compressed).
# GANTRY_CHECK_LOAD is a command that keeps GPU 0 busy for ~20 s (default: PyTorch if present).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
nvidia-smi -L || echo "note: nvidia-smi not found; continuing with NVML alone" >&2

if [[ -n "${GANTRY_PREBUILT:-}" ]]; then
  gantry="$(realpath "$GANTRY_PREBUILT/gantry")"
  echo "== NVML backend tests (prebuilt, ignored tests included)"
  # The fake-library tests (nvml_fake::) need libgantry_fake_nvml.so beside the binary; they run
  # in the normal suite anyway, so a prebuilt binary on its own skips them.
  "$GANTRY_PREBUILT/gpu-tests" --include-ignored --nocapture --test-threads=1 --skip nvml_fake::
else
  echo "== NVML backend tests (feature nvml-tests, ignored tests included)"
  cargo test -p gantry-gpu --features nvml-tests -- --include-ignored --nocapture --test-threads=1
  cargo build -p gantry
  gantry="$(realpath ./target/debug/gantry)"
fi

echo "== gantry gpus --backend nvml"
"$gantry" gpus --backend nvml -o json --samples 2
"$gantry" gpus --backend nvml

load_cmd="${GANTRY_CHECK_LOAD:-}"
if [[ -z "$load_cmd" ]] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  load_cmd="python3 -c 'import torch,time; a=torch.randn(8192,8192,device=\"cuda\",dtype=torch.bfloat16); t=time.time()
while time.time()-t<20: (a@a).sum().item()'"
fi

scrape() { # port -> body on stdout
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  cat <&3
  exec 3<&-
}

echo "== one scrape of gantry exporter --backend nvml (GPU 0 busy: ${load_cmd:+yes}${load_cmd:-no load command})"
port="${GANTRY_CHECK_PORT:-19400}"
"$gantry" exporter --backend nvml --listen "127.0.0.1:${port}" --interval-ms 500 &
exporter=$!
load=""
cleanup() { kill "$exporter" ${load:+"$load"} ${up:+"$up"} 2>/dev/null || true; }
trap cleanup EXIT
if [[ -n "$load_cmd" ]]; then bash -c "$load_cmd" & load=$!; fi
sleep 6
body="$(scrape "$port")"
printf '%s\n' "$body" | grep -E '^(DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_SM_CLOCK|DCGM_FI_DEV_FB_USED|DCGM_FI_PROF_PIPE_TENSOR_ACTIVE|DCGM_FI_PROF_GR_ENGINE_ACTIVE|gantry_gpu_health_state|gantry_gpu_process)' | head -40
missing=0
for m in DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_GPU_TEMP DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_FB_USED DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gantry_gpu_health_state; do
  grep -q "^${m}{" <<<"$body" || { echo "MISSING: ${m}" >&2; missing=1; }
done
if [[ -n "$load" ]]; then
  util="$(grep -E '^DCGM_FI_DEV_GPU_UTIL\{.*gpu="0"' <<<"$body" | awk '{print $NF}' | head -1)"
  echo "GPU 0 utilisation under load: ${util:-none}"
  [[ -n "$util" && "${util%%.*}" -gt 0 ]] || { echo "FAIL: GPU 0 shows no utilisation under load" >&2; missing=1; }
  wait "$load" || true; load=""
fi
kill "$exporter" 2>/dev/null || true

if [[ -n "$load_cmd" ]]; then
  echo "== gantry up on the real GPUs: a GPU job runs and is attributed"
  data="$(mktemp -d)"; export GANTRY_CONFIG="$data/client.toml"
  "$gantry" up --data-dir "$data/up" --listen 127.0.0.1:17070 --metrics-listen "127.0.0.1:$((port + 1))" --grace 2 \
    >"$data/up.log" 2>&1 &
  up=$!
  for _ in $(seq 50); do "$gantry" nodes >/dev/null 2>&1 && break; sleep 0.2; done
  head -5 "$data/up.log"
  # The job's environment is an allow-list: hand it this shell's PATH (python3 may live in a venv).
  id="$("$gantry" submit --gpus 1 -e "PATH=$PATH" -- bash -c "id -un; ls -l /dev/nvidia0; $load_cmd")"
  sleep 10
  "$gantry" jobs -o json | head -c 1500; echo
  body="$(scrape $((port + 1)))"
  grep -E "job_id=\"$id\"" <<<"$body" | head -5 || true
  grep -q "job_id=\"$id\"" <<<"$body" || { echo "FAIL: job $id's GPU process is not attributed" >&2; missing=1; }
  for _ in $(seq 60); do "$gantry" job "$id" | grep -qE "succeeded|failed|cancelled" && break; sleep 1; done
  "$gantry" job "$id" | head -20
  "$gantry" logs "$id" || true
  "$gantry" job "$id" | grep -q succeeded || { echo "FAIL: the sandboxed GPU job did not succeed" >&2; missing=1; }
  kill -INT "$up"; wait "$up" || true; up=""
  tail -5 "$data/up.log"
fi
exit "$missing"
