#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kubectl from the Go module proxy into a cache keyed by this
# folder's go.mod and go.sum, so that a second run is instant. Prints the bin folder on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
need_go

mod="$here/kube"
out="$(peer_cache kube "$mod")"
if [ -x "$out/kube-apiserver" ] && [ -x "$out/kubectl" ] && [ -x "$out/etcd" ]; then
  echo "$out"
  exit 0
fi

ver=v1.37.2
ld=$(kube_ldflags "$ver")

tmp="$out.tmp.$$"
mkdir -p "$tmp"
cd "$mod"
progress "kube: downloading modules (cold: about a minute)"
go mod download || die "go mod download failed in $mod: is the Go module proxy reachable?"
for cmd in kube-apiserver kubectl; do
  progress "kube: building $cmd $ver (cold: up to 20 minutes on 2 cores)"
  go build -trimpath -ldflags "$ld" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd" \
    || die "building $cmd failed (see the Go errors above)"
done
progress "kube: building etcd"
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 \
  || die "building etcd failed (see the Go errors above)"
mv -T "$tmp" "$out"
progress "kube: binaries in $out"
echo "$out"
