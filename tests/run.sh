#!/usr/bin/env bash
# Runs every test. Set-up included: builds the real peers from package registries into
# $HOME/.cache/bsl-sentinel (cached: instant the second time), then runs cargo's unit and
# integration tests, which start those peers on 127.0.0.1.
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

progress "cargo test (first build of the crate takes a few minutes)"
cargo test --locked --all-targets
