#!/usr/bin/env bash
# Runs every test. Set-up included: builds the real peers from package registries into
# $HOME/.cache/bsl-sentinel (cached: instant the second time), then runs cargo's unit and
# integration tests, which start those peers on 127.0.0.1, then each fuzz target briefly, then
# the install on a real single-node cluster (tests/cluster/run.sh; needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/peers/lib.sh
. tests/peers/lib.sh
need_cargo

progress "peers: etcd, kube-apiserver, kubectl"
BSL_SENTINEL_KUBE_BIN=$(bash tests/peers/build-kube.sh)
export BSL_SENTINEL_KUBE_BIN
progress "peers: Velero's CRD from the Velero Go module"
bash tests/peers/velero-crd.sh >/dev/null
progress "peers: SeaweedFS, fake-gcs-server, Azurite"
bash tests/peers/build-storage.sh >/dev/null
progress "peers: cert-manager controller and cainjector"
bash tests/peers/build-cert-manager.sh >/dev/null
progress "peers: Velero server and CLI, velero-plugin-for-aws"
bash tests/peers/build-velero.sh >/dev/null
progress "peers: helm (Helm v4 CLI, for the chart's tests)"
bash tests/peers/build-helm.sh >/dev/null
progress "peers: promtool (Prometheus, for the alert rules' tests)"
bash tests/peers/build-promtool.sh >/dev/null
progress "peers: the node: kube-controller-manager, kube-scheduler, kubelet, containerd, runc"
bash tests/peers/build-node.sh >/dev/null

log=$(mktemp)
trap 'rm -f "$log"' EXIT
progress "cargo test (first build of the crate takes a few minutes)"
tests=0
cargo test --locked --all-targets 2>&1 | tee "$log" || tests=$?
progress "fuzz: every target for a few seconds (bash fuzz/run.sh SECONDS for a long run)"
fuzz=0
bash fuzz/run.sh 10 | tee -a "$log" || fuzz=$?
progress "cluster: the install on a real node (release build of bsl-sentinel for its image)"
cluster=0
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
if cargo build --release --locked --bin bsl-sentinel; then
  bash tests/cluster/run.sh "$target/release/bsl-sentinel" | tee -a "$log" || cluster=$?
else
  cluster=1
fi
# A run that ended before its tests (no root, a peer that did not start) is one failure.
grep -qE '^cluster: [0-9]+ passed' "$log" \
  || echo "cluster: 0 passed, 1 failed (tests/cluster/run.sh ended before its tests; see above)" | tee -a "$log"

# One plain summary line: cargo's test results, the fuzz targets and the cluster tests.
sum() {
  grep -E '^(test result:|fuzz: [0-9]|cluster: [0-9])' "$log" | grep -oE "[0-9]+ $1" | awk '{n += $1} END {print n + 0}'
}
echo "$(sum passed) passed, $(sum failed) failed"
[ "$tests" -eq 0 ] && [ "$fuzz" -eq 0 ] && [ "$cluster" -eq 0 ]
