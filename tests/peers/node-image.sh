#!/usr/bin/env bash
# Makes bsl-sentinel's image offline, for a test node's containerd:
#   node-image.sh BINARY [OUT.tar] [NAME]
# BINARY: a bsl-sentinel built by `cargo build --release` (glibc). The root filesystem is made
# the way distroless makes its images, from Debian's packages: libc6, libgcc-s1 and
# ca-certificates unpacked (apt-get download, dpkg-deb -x, no maintainer scripts), the CA bundle
# that update-ca-certificates would write, /etc/passwd and /etc/group with nonroot (65532), /tmp
# and /home/nonroot. That base is cached under peers/distroless-<hash of the package versions>.
# The image has the Dockerfile's layout: /bsl-sentinel, USER 65532:65532, ports 8443 and 8080,
# ENTRYPOINT ["/bsl-sentinel"], CMD ["serve"]. Written as an OCI image layout in a tar archive
# (default: image-<name>.tar beside BINARY) for `ctr -n k8s.io images import`; NAME defaults to
# the Dockerfile's and deploy/deployment.yaml's bsl-sentinel:0.1.0. Prints the archive's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib-node.sh
. "$here/lib-node.sh"

[ $# -ge 1 ] || die "usage: node-image.sh BINARY [OUT.tar] [NAME]"
bin=$(realpath "$1")
[ -x "$bin" ] || die "$1 is not an executable file"
out=${2:-$(dirname "$bin")/image-bsl-sentinel.tar}
name=${3:-docker.io/library/bsl-sentinel:0.1.0}
need_umoci

# --- the distroless-like base, cached --------------------------------------------------------
pkgs=(libc6 libgcc-s1 ca-certificates)
versions=""
for p in "${pkgs[@]}"; do
  v=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then
    apt-get update -qq >&2 || true
    v=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
  fi
  [ -n "$v" ] && [ "$v" != "(none)" ] || die "Debian package $p is not known to apt (apt-get update?)"
  versions="$versions $p=$v"
done
key=$(printf 'base-v1%s\n' "$versions" | sha256sum | cut -c1-16)
base="$(cache_root)/peers/distroless-$key"
if [ ! -d "$base/rootfs" ]; then
  t0=$(date +%s)
  progress "image: making the base from Debian's packages:$versions"
  tmp="$base.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp/rootfs"
  # apt-get download writes into the current folder, as user _apt: a folder it can reach.
  debs=$(mktemp -d)
  chmod 777 "$debs"
  # shellcheck disable=SC2086
  (cd "$debs" && apt-get download -q $versions >&2) \
    || die "apt-get download$versions failed"
  for deb in "$debs"/*.deb; do
    dpkg-deb -x "$deb" "$tmp/rootfs"
    dpkg-deb -f "$deb" Package Version | paste -sd' ' >> "$tmp/packages.txt"
  done
  r="$tmp/rootfs"
  # Keep the licences (usr/share/doc/*/copyright), drop the rest of the documentation.
  rm -rf "$r/usr/share/man" "$r/usr/share/info" "$r/usr/share/lintian"
  find "$r/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
  # What update-ca-certificates writes for the certificates ca-certificates enables by default.
  mkdir -p "$r/etc/ssl/certs"
  find "$r/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat \
    > "$r/etc/ssl/certs/ca-certificates.crt"
  [ -s "$r/etc/ssl/certs/ca-certificates.crt" ] || die "no CA certificates in ca-certificates"
  cat > "$r/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat > "$r/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$r/etc/nsswitch.conf"
  mkdir -p "$r/tmp" "$r/home/nonroot" "$r/root"
  chmod 1777 "$r/tmp"
  chmod 700 "$r/home/nonroot" "$r/root"
  chown 65532:65532 "$r/home/nonroot"
  rm -rf "$debs" "$base"
  mv -T "$tmp" "$base"
  progress "image: base in $base ($(du -sh "$base/rootfs" | cut -f1), $(( $(date +%s) - t0 ))s)"
fi

# --- the binary must run on that base ----------------------------------------------------------
interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
if [ -n "$interp" ]; then
  [ -e "$base/rootfs$interp" ] || die "$bin wants interpreter $interp, which the base lacks"
  for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    found=""
    for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib usr/lib; do
      if [ -e "$base/rootfs/$d/$lib" ]; then found=1; break; fi
    done
    [ -n "$found" ] || die "$bin needs $lib, which the base lacks (add its Debian package)"
  done
fi

# --- the image ---------------------------------------------------------------------------------
t0=$(date +%s)
progress "image: packing $name from $bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$base/rootfs" "$work/rootfs"
install -m 0755 -o 0 -g 0 "$bin" "$work/rootfs/bsl-sentinel"
oci_archive "$work/rootfs" "$out" "$name" 65532:65532 /bsl-sentinel serve \
  --config.exposedports 8443/tcp --config.exposedports 8080/tcp \
  --config.workingdir /home/nonroot \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
progress "image: $out ($(du -h "$out" | cut -f1), $(( $(date +%s) - t0 ))s)"
echo "$out"
