#!/usr/bin/env bash
# The one test command (README): installs what the tests need (prometheus, chromium, certutil,
# grpcio, postgresql, moto, and as root the CNI plugins and iptables),
# then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v prometheus >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's prometheus package for the real-scrape test" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
      || echo "warning: could not install prometheus; the real-scrape test will fail" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 || ! command -v certutil >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium, chromium-driver and libnss3-tools (certutil, for gantry ca install) for the dashboard's browser tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver libnss3-tools >/dev/null) \
      || echo "warning: could not install chromium; the browser test will fail in CI" >&2
  fi
fi
# The store's suite on PostgreSQL and `gantry up --db postgres://…`: a throwaway server from
# Debian's postgresql package (initdb + postgres under /usr/lib/postgresql/*/bin). Without it
# those tests fail, loudly; GANTRY_TEST_NO_POSTGRES=1 skips them (locally only).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's postgresql package for the PostgreSQL store tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null) \
      || echo "warning: could not install postgresql; the PostgreSQL store tests will fail" >&2
  fi
fi
# The device plugin's independent-peer test: a fake kubelet in Python grpcio, generated from the
# proto at test time. Once installed, the test must run (it fails rather than skips).
if ! python3 -c 'import grpc, grpc_tools.protoc' 2>/dev/null; then
  echo "installing grpcio and grpcio-tools from PyPI for the device plugin's fake-kubelet test" >&2
  python3 -m pip install -q grpcio grpcio-tools 2>/dev/null \
    || python3 -m pip install -q --break-system-packages grpcio grpcio-tools 2>/dev/null \
    || echo "warning: could not install grpcio; the device plugin's fake-kubelet test is SKIPPED" >&2
fi
if python3 -c 'import grpc, grpc_tools.protoc' 2>/dev/null; then
  export GANTRY_REQUIRE_PEER_TESTS=1
fi
# Declared inputs end to end against a real S3 implementation on loopback: moto's server from
# PyPI. Once installed, the S3 tests must run (they fail rather than skip).
if ! python3 -c 'import moto.server, boto3' 2>/dev/null; then
  echo "installing moto[server] from PyPI for the S3 input tests" >&2
  python3 -m pip install -q 'moto[server]' 2>/dev/null \
    || python3 -m pip install -q --break-system-packages 'moto[server]' 2>/dev/null \
    || echo "warning: could not install moto; the S3 input tests are SKIPPED" >&2
fi
if python3 -c 'import moto.server, boto3' 2>/dev/null; then
  export GANTRY_REQUIRE_S3_TESTS=1
fi
if ! command -v tmux >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's tmux for the terminal test of gantry top" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tmux >/dev/null) \
      || echo "warning: could not install tmux; the tmux test of gantry top will be skipped" >&2
  fi
fi
# The job network namespace tests (root only): the standard CNI plugins and iptables. Once they
# are there, the tests must run (they fail rather than skip).
if [ "$(id -u)" = 0 ]; then
  if ! [ -x /usr/lib/cni/bridge ] && ! [ -x /opt/cni/bin/bridge ] || ! command -v iptables >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "installing Debian's containernetworking-plugins and iptables for the job network tests" >&2
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containernetworking-plugins iptables >/dev/null) \
        || echo "warning: could not install the CNI plugins; the job network tests are SKIPPED" >&2
    fi
  fi
  if [ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ]; then
    export GANTRY_REQUIRE_NETNS_TESTS=1
  fi
fi
# Containers (issue 40, root only): a loopback registry (Debian's docker-registry), skopeo to
# push test images built from busybox-static, and the OCI runtimes runc and crun. Once they are
# there, the container tests must run (they fail rather than skip).
if [ "$(id -u)" = 0 ]; then
  missing=""
  for t in docker-registry skopeo runc crun busybox htpasswd; do
    command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
  done
  if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's docker-registry, skopeo, runc, crun, busybox-static and apache2-utils (htpasswd) for the container tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry skopeo runc crun busybox-static apache2-utils >/dev/null) \
      || echo "warning: could not install the container tools; the container tests are SKIPPED" >&2
  fi
  if command -v docker-registry >/dev/null 2>&1 && command -v skopeo >/dev/null 2>&1 \
    && command -v runc >/dev/null 2>&1 && command -v busybox >/dev/null 2>&1; then
    export GANTRY_REQUIRE_CONTAINER_TESTS=1
  fi
fi
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Every crate's tests run even when one fails (cargo stops at the first failing target otherwise).
cargo test --workspace --no-fail-fast "$@"
