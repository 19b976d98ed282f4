# shellcheck shell=bash
# Helpers for the node scripts: OCI images made offline with Debian's umoci.
# shellcheck source=tests/peers/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_umoci() {
  command -v umoci >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    || die "umoci is missing: install Debian's umoci package"
  progress "image: installing umoci with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq umoci >&2 \
    || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq umoci >&2; } \
    || die "apt-get install umoci failed"
}

# oci_archive ROOTFS OUT.tar NAME USER ENTRYPOINT CMD [umoci config options...]
# Packs the folder ROOTFS as the single layer of an image, as an OCI image layout in a tar
# archive, which `ctr images import` loads as NAME (a full reference: docker.io/library/x:tag,
# the name the kubelet asks for when a pod says x:tag). ENTRYPOINT and CMD are one argument
# each (CMD may be empty).
oci_archive() {
  local rootfs=$1 out=$2 name=$3 user=$4 entrypoint=$5 cmd=$6
  shift 6
  need_umoci
  local work
  work=$(mktemp -d)
  local layout="$work/oci" tag=${name##*:}
  umoci init --layout "$layout" >&2
  umoci new --image "$layout:$tag" >&2
  umoci insert --image "$layout:$tag" --history.created_by "$(basename "$0"): one layer" \
    --history.comment "$name" "$rootfs" / >&2
  local args=(--image "$layout:$tag" --os linux --architecture amd64
              --config.user "$user" --config.entrypoint "$entrypoint")
  if [ -n "$cmd" ]; then args+=(--config.cmd "$cmd"); fi
  umoci config "${args[@]}" "$@" >&2
  umoci gc --layout "$layout" >&2
  # ctr names an imported image by this annotation (umoci writes only the bare tag).
  python3 - "$layout/index.json" "$name" <<'EOF'
import json, sys
path, name = sys.argv[1], sys.argv[2]
with open(path) as f:
    index = json.load(f)
for m in index["manifests"]:
    m.setdefault("annotations", {})["io.containerd.image.name"] = name
with open(path, "w") as f:
    json.dump(index, f)
EOF
  tar -C "$layout" -cf "$out.tmp" . && mv "$out.tmp" "$out"
  rm -rf "$work"
}
