#!/usr/bin/env bash
# How long the build-and-test loop takes on this machine (issue 39, point 1). Prints one line a
# measure, in seconds:
#   core edit -> cargo test -p gantry-core      a line touched in crates/core/src/sched/
#   core edit -> cargo build -p gantry          the same edit, to the one binary
#   server edit -> cargo build -p gantry        a line touched in crates/server/src/
# and with --clean (each in a fresh target directory, so the caller's is left alone):
#   clean release build of gantry
#   clean test build of the workspace (cargo test --workspace --no-run)
# and with --tests: the wall time of `cargo test --workspace` once everything is built.
#
# The edit is a new public item appended to a source file (as adding a function is), taken back
# afterwards (also on Ctrl-C).
# Usage: scripts/build-times.sh [--clean] [--tests]
set -euo pipefail
cd "$(dirname "$0")/.."

clean=0
tests=0
for arg in "$@"; do
  case "$arg" in
    --clean) clean=1 ;;
    --tests) tests=1 ;;
    *) echo "usage: scripts/build-times.sh [--clean] [--tests]" >&2; exit 2 ;;
  esac
done

core_file=crates/core/src/sched/mod.rs
server_file=crates/server/src/lib.rs
backup=$(mktemp -d)
cp "$core_file" "$backup/core.rs"
cp "$server_file" "$backup/server.rs"
restore() {
  cp "$backup/core.rs" "$core_file"
  cp "$backup/server.rs" "$server_file"
  rm -rf "$backup"
}
trap restore EXIT

now() { date +%s.%N; }
# seconds LABEL COMMAND...: runs the command quietly and prints how long it took.
seconds() {
  local label=$1; shift
  local start end
  start=$(now)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  end=$(now)
  awk -v l="$label" -v a="$start" -v b="$end" 'BEGIN { printf "%-48s %8.1f s\n", l, b - a }'
}
# touch_line FILE: appends a new public item (its dependents see a new interface).
touch_line() {
  local n
  n=$(date +%s%N)
  printf '\n#[doc(hidden)]\npub fn build_times_probe_%s() -> u64 {\n    %s\n}\n' "$n" "$n" >> "$1"
}

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(cargo --version)"
# Everything built first, so that each measure is one edit's worth.
cargo build -p gantry >/dev/null 2>&1
cargo test -p gantry-core --no-run >/dev/null 2>&1

touch_line "$core_file"
seconds "core edit -> cargo test -p gantry-core" cargo test -p gantry-core
cp "$backup/core.rs" "$core_file"; touch_line "$core_file"
seconds "core edit -> cargo build -p gantry" cargo build -p gantry
cp "$backup/core.rs" "$core_file"
touch_line "$server_file"
seconds "server edit -> cargo build -p gantry" cargo build -p gantry
cp "$backup/server.rs" "$server_file"

if [ "$clean" = 1 ]; then
  fresh=$(mktemp -d)
  seconds "clean release build of gantry" env CARGO_TARGET_DIR="$fresh/release" cargo build --release -p gantry
  seconds "clean test build of the workspace" env CARGO_TARGET_DIR="$fresh/test" cargo test --workspace --no-run
  rm -rf "$fresh"
fi
if [ "$tests" = 1 ]; then
  cargo test --workspace --no-run >/dev/null 2>&1
  seconds "cargo test --workspace (built)" cargo test --workspace --no-fail-fast
fi
