#!/usr/bin/env bash
# Builds the fake NVIDIA management library (crates/fake-nvml, test-only) and prints the
# directory that holds it as libnvidia-ml.so.1. With that directory on LD_LIBRARY_PATH the real
# NVML adapter runs against scripted GPUs:
#
#   export LD_LIBRARY_PATH="$(scripts/fake-nvml.sh)"
#   gantry gpus --backend nvml
#   GANTRY_FAKE_NVML_SCENARIO=my-gpus.toml gantry exporter --backend nvml
#   gantry up            # the agent opens NVML and finds the fake GPUs
#
# The scenario is $GANTRY_FAKE_NVML_SCENARIO, else the built-in one (two H200s, GPU 0 busy:
# crates/fake-nvml/scenarios/h200.toml). The format is documented in
# crates/fake-nvml/src/scenario.rs and docs/gpu.md. Never put this directory on the loader path
# of a machine with a real driver you mean to use.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet -p gantry-fake-nvml >&2
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
built="$target/debug/libgantry_fake_nvml.so"
[[ -f "$built" ]] || { echo "fake-nvml.sh: $built was not built" >&2; exit 1; }
dir="$target/fake-nvml"
mkdir -p "$dir"
# A link, so a rebuild is picked up. (A fake-nvml.toml put beside it would win over the variable.)
ln -sfn "$built" "$dir/libnvidia-ml.so.1"
echo "$dir"
