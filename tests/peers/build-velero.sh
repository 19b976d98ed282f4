#!/usr/bin/env bash
# Builds Velero v1.18.3 (`velero`: the server and the CLI) and velero-plugin-for-aws v1.14.3
# from the Go module proxy, through the helper modules tests/peers/velero and
# tests/peers/velero-plugin-for-aws (each repeats Velero's kopia replace), into caches keyed by
# their go.mod and go.sum. Prints `velero=PATH` and `plugins=DIR` (DIR holds only the aws
# plugin: `velero server --plugin-dir DIR`).
#
# Run out of cluster against a test apiserver:
#   velero install --crds-only --dry-run -o yaml | kubectl apply -f -
#   velero server --kubeconfig K --namespace velero --plugin-dir DIR \
#     --metrics-address 127.0.0.1:PORT --profiler-address 127.0.0.1:PORT
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/peers/lib-storage.sh
. "$here/lib-storage.sh"

velero=$(go_peer velero "$here/velero" velero github.com/vmware-tanzu/velero/cmd/velero \
  "about 10 minutes on 2 cores" --help)
# A plugin binary only serves Velero's handshake; the server's start in the tests is its check.
plugins=$(go_peer velero-plugin-for-aws "$here/velero-plugin-for-aws" velero-plugin-for-aws \
  github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws "about 5 minutes on 2 cores" \
  -)
echo "velero=$velero/velero"
echo "plugins=$plugins"
