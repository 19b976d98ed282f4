#!/usr/bin/env bash
# Prints the path of Velero's own BackupStorageLocation CRD, taken from the Velero Go module
# (fetched through the Go module proxy and checked against the checksum database), so that its
# text is never copied into this repository.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
need_go

version=v1.18.3
dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/vmware-tanzu/velero@$version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') \
  || die "go mod download github.com/vmware-tanzu/velero@$version failed: is the Go module proxy reachable?"
crd="$dir/config/crd/v1/bases/velero.io_backupstoragelocations.yaml"
[ -f "$crd" ] || die "Velero $version has no $crd"
echo "$crd"
