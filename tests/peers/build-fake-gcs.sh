#!/usr/bin/env bash
# Builds fake-gcs-server (a Google Cloud Storage JSON API emulator) from the Go module proxy
# into a cache keyed by tests/peers/fake-gcs/go.mod and go.sum, so that a second run is instant.
# Prints the folder holding `fake-gcs-server` on stdout.
#
# Start it for a test (set -host: its default is 0.0.0.0):
#   fake-gcs-server -scheme http -host 127.0.0.1 -port P -backend filesystem \
#     -filesystem-root DIR -public-host 127.0.0.1:P -external-url http://127.0.0.1:P
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/peers/lib-storage.sh
. "$here/lib-storage.sh"

go_peer fake-gcs "$here/fake-gcs" fake-gcs-server github.com/fsouza/fake-gcs-server \
  "about a minute" -help
