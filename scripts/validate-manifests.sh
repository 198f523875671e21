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
# Every manifest is named by its directory's kustomization (deploy/kubernetes/, the monitoring/
# overlay, which adds what needs the Prometheus Operator, and the ha/ overlay: replicated servers).
for d in "$dir" "$dir/monitoring" "$dir/ha"; do
  for f in "$d"/*.yaml; do
    name=$(basename "$f")
    [ "$name" = kustomization.yaml ] && continue
    grep -q -- "- $name\$" "$d/kustomization.yaml" || { echo "$d/$name is not listed in its kustomization.yaml" >&2; exit 1; }
  done
done
# Custom resources (here the Prometheus Operator's ServiceMonitor) are not in the Kubernetes
# schemas: they are skipped by the validator, said so here, and checked for what matters instead
# (the ServiceMonitor selects the exporter Service by its labels and names one of its ports).
mapfile -t crds < <(grep -l '^apiVersion: monitoring.coreos.com/' "$dir"/*.yaml "$dir"/monitoring/*.yaml "$dir"/ha/*.yaml || true)
for f in "${crds[@]}"; do
  echo "skipping $f: a CRD (monitoring.coreos.com) the Kubernetes $K8S_VERSION schemas do not describe; checking its selector and port instead" >&2
done
python3 - "$dir" "${crds[@]}" <<'PY'
import glob, sys, yaml
root, crds = sys.argv[1], sys.argv[2:]
services = [d for f in glob.glob(f"{root}/*.yaml") for d in yaml.safe_load_all(open(f)) if d and d.get("kind") == "Service"]
for f in crds:
    for sm in (d for d in yaml.safe_load_all(open(f)) if d and d.get("kind") == "ServiceMonitor"):
        want = sm["spec"]["selector"]["matchLabels"]
        hits = [s for s in services if all(s["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
        if not hits:
            sys.exit(f"{f}: ServiceMonitor {sm['metadata']['name']} selects no Service by {want}")
        ports = {p.get("name") for s in hits for p in s["spec"]["ports"]}
        for e in sm["spec"]["endpoints"]:
            if e.get("port") not in ports:
                sys.exit(f"{f}: endpoint port {e.get('port')!r} is not a port of the selected Service ({sorted(ports)})")
PY
# The Kustomization kind has no Kubernetes schema; validate the rest strictly.
mapfile -t files < <(ls "$dir"/*.yaml "$dir"/monitoring/*.yaml "$dir"/ha/*.yaml | grep -v '/kustomization.yaml$' | grep -vxF -f <(printf '%s\n' "${crds[@]}"))
kubernetes-validate --strict --quiet -k "$K8S_VERSION" "${files[@]}"
echo "Kubernetes manifests valid for $K8S_VERSION (${#files[@]} files; ${#crds[@]} CRD manifest(s) checked structurally, not against schemas)"
