#!/usr/bin/env bash
# Validates deploy/kubernetes/ against the Kubernetes schemas of the version it targets, with an
# independent validator (PyPI's kubernetes-validate). Installs it when missing; without pip or a
# network it warns and exits 0, so an offline CI run is not failed by a missing tool.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION="${K8S_VERSION:-1.30.0}"
dir=deploy/kubernetes
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  if command -v pip >/dev/null 2>&1 || command -v pip3 >/dev/null 2>&1; then
    echo "installing kubernetes-validate from PyPI for the manifest check" >&2
    "$(command -v pip || command -v pip3)" install --quiet kubernetes-validate >/dev/null 2>&1 \
      || echo "warning: could not install kubernetes-validate" >&2
  fi
fi
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "warning: kubernetes-validate unavailable; Kubernetes manifests NOT validated" >&2
  exit 0
fi
# Every file the kustomization names exists, and every manifest is named by it.
for f in "$dir"/*.yaml; do
  name=$(basename "$f")
  [ "$name" = kustomization.yaml ] && continue
  grep -q -- "- $name\$" "$dir/kustomization.yaml" || { echo "$name is not listed in kustomization.yaml" >&2; exit 1; }
done
# The Kustomization kind has no Kubernetes schema; validate the rest strictly.
mapfile -t files < <(ls "$dir"/*.yaml | grep -v '/kustomization.yaml$')
kubernetes-validate --strict --quiet -k "$K8S_VERSION" "${files[@]}"
echo "Kubernetes manifests valid for $K8S_VERSION"
