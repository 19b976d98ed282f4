#!/usr/bin/env bash
# Builds or installs the object-storage peers in turn: SeaweedFS (S3), fake-gcs-server (GCS),
# Azurite (Azure Blob) and moto (S3 standing in for AWS itself). Progress goes to stderr. On
# stdout it prints exactly:
#   seaweedfs=<folder holding weed>
#   fake_gcs=<folder holding fake-gcs-server>
#   azurite=<path of azurite-blob>
#   moto=<path of moto_server>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"

last_line() { tail -n1; }
progress "storage peers: 1/4 SeaweedFS"
seaweedfs=$("$here/build-seaweedfs.sh" | last_line) || die "building SeaweedFS failed"
progress "storage peers: 2/4 fake-gcs-server"
fake_gcs=$("$here/build-fake-gcs.sh" | last_line) || die "building fake-gcs-server failed"
progress "storage peers: 3/4 Azurite"
azurite=$("$here/install-azurite.sh" | last_line) || die "installing Azurite failed"
progress "storage peers: 4/4 moto"
moto=$("$here/install-moto.sh" | last_line) || die "installing moto failed"
[ -x "$seaweedfs/weed" ] || die "no weed in '$seaweedfs'"
[ -x "$fake_gcs/fake-gcs-server" ] || die "no fake-gcs-server in '$fake_gcs'"
[ -x "$azurite" ] || die "no azurite-blob at '$azurite'"
[ -x "$moto" ] || die "no moto_server at '$moto'"
progress "storage peers: ready"
printf 'seaweedfs=%s\nfake_gcs=%s\nazurite=%s\nmoto=%s\n' "$seaweedfs" "$fake_gcs" "$azurite" "$moto"
