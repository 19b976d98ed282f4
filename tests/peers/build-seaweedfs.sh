#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (a real S3 endpoint that checks SigV4 signatures) from the Go module
# proxy into a cache keyed by tests/peers/seaweedfs/go.mod and go.sum, so that a second run is
# instant. Prints the folder holding `weed` on stdout.
#
# Start it for a test (one process; every port distinct and free; -ip must stay 127.0.0.1, its
# default is the machine's address):
#   env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY weed -logtostderr mini -dir=DATA \
#     -ip=127.0.0.1 -ip.bind=127.0.0.1 -s3.config=s3.json -master.telemetry=false ...
# tests/peers/storage-smoke.sh has the full command line and a working s3.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/peers/lib-storage.sh
. "$here/lib-storage.sh"

go_peer seaweedfs "$here/seaweedfs" weed github.com/seaweedfs/seaweedfs/weed \
  "about 5 minutes on 2 cores, 2 GB of RAM" version
