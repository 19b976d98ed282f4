#!/usr/bin/env bash
# The install on a real single-node cluster, as the README tells a user to do it:
#   tests/cluster/run.sh [BINARY]     BINARY: bsl-sentinel (default target/release/bsl-sentinel)
# Needs root. Builds (or takes from the cache) etcd, kube-apiserver, kubectl (build-kube.sh),
# the node binaries (build-node.sh), cert-manager (build-cert-manager.sh), moto
# (install-moto.sh), Helm (build-helm.sh) and bsl-sentinel's image (node-image.sh), then,
# inside a network namespace
# it makes (lo, and $NODE_IP on a veth pair kept inside it; no route leaves it), a private mount
# namespace and a PID namespace: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# containerd, kubelet, cert-manager's controller and cainjector, and moto as the S3 server.
# When the node is Ready it runs the tests of tests/cluster/tests.sh one after the other on that
# cluster, prints `test cluster::NAME ... ok|FAILED` for each and ends with
# `cluster: N passed, M failed`; then it tears it all down (processes, mounts, cgroups, sysctls
# the kubelet set, the network namespace). Logs stay in the folder it prints.
# CLUSTER_KEEP=1 keeps the whole temporary folder; CLUSTER_TESTS="a b" runs only those tests;
# CLUSTER_RUNC_DEBUG=1 keeps runc's log of every failed create.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
peers=$(cd "$here/../peers" && pwd)
# shellcheck source=tests/peers/lib-node.sh
. "$peers/lib-node.sh"

NODE_IP=${NODE_IP:-10.99.0.1}
NODE_NAME=bsl-node
POD_CIDR=10.99.1.0/24
SERVICE_CIDR=10.0.0.0/24
# Folders the kubelet, containerd and its shims use whatever their configuration says; inside
# the private mount namespace each gets a bind mount from the temporary folder.
HOST_DIRS=(/run/containerd /var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni)
# The kubelet sets these (protectKernelDefaults: false); they are put back afterwards.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
         kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# ---------------------------------------------------------------------------------------------
# Inside the namespaces (PID 1 of the PID namespace).
# ---------------------------------------------------------------------------------------------
declare -A PIDS=()
start() { # start NAME COMMAND...: in the background, output to logs/NAME.log
  local name=$1
  shift
  "$@" > "$T/logs/$name.log" 2>&1 &
  PIDS[$name]=$!
}
fail() {
  local name=${2:-}
  printf 'error: %s\n' "$1" >&2
  if [ -n "$name" ] && [ -f "$T/logs/$name.log" ]; then
    echo "--- last lines of $T/logs/$name.log:" >&2
    tail -n 30 "$T/logs/$name.log" >&2
  fi
  exit 1
}
wait_for() { # wait_for SECONDS NAME COMMAND...: until COMMAND succeeds, NAME still running
  local secs=$1 name=$2 i
  shift 2
  for ((i = 0; i < secs * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -n "${PIDS[$name]:-}" ] && ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
      fail "$name exited" "$name"
    fi
    sleep 0.5
  done
  fail "$name: not ready after ${secs}s ($*)" "$name"
}
kc() { "$KUBE_BIN/kubectl" --kubeconfig "$T/pki/admin.kubeconfig" "$@"; }
node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

mkcert() { # mkcert NAME CN O EXT SAN: a certificate signed by the test CA
  local name=$1 cn=$2 o=$3 ext=$4 san=${5:-}
  local subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o/CN=$cn"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$T/pki/$name.key" -subj "$subj" -out "$T/pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$ext"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$T/pki/$name.ext"
  openssl x509 -req -in "$T/pki/$name.csr" -CA "$T/pki/ca.crt" -CAkey "$T/pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$T/pki/$name.ext" -out "$T/pki/$name.crt" 2>/dev/null
}
kubeconfig() { # kubeconfig NAME SERVER: a kubeconfig with NAME's client certificate
  cat > "$T/pki/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {server: "$2", certificate-authority: "$T/pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$T/pki/$1.crt", client-key: "$T/pki/$1.key"}
contexts:
- name: cluster
  context: {cluster: cluster, user: $1}
current-context: cluster
EOF
}

inner_teardown() {
  set +e
  echo "--- teardown" >&2
  if [ -n "${PIDS[kube-apiserver]:-}" ] && [ -n "${PIDS[kubelet]:-}" ]; then
    # The kubelet stops the pods' containers and sandboxes (and unmounts their volumes).
    kc delete pods --all -A --wait=true --timeout=60s >/dev/null 2>&1
  fi
  local name
  for name in kubelet kube-scheduler kube-controller-manager kube-apiserver; do
    [ -n "${PIDS[$name]:-}" ] && kill -TERM "${PIDS[$name]}" 2>/dev/null && wait "${PIDS[$name]}" 2>/dev/null
  done
  if [ -n "${PIDS[containerd]:-}" ]; then
    # Whatever the kubelet left: kill its tasks, so the shims end.
    local ctr=("$NODE_BIN/ctr" --address "$T/containerd/containerd.sock" -n k8s.io)
    for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$t" 2>/dev/null; done
    sleep 1
    kill -TERM "${PIDS[containerd]}" 2>/dev/null && wait "${PIDS[containerd]}" 2>/dev/null
  fi
  [ -n "${PIDS[etcd]:-}" ] && kill -TERM "${PIDS[etcd]}" 2>/dev/null && wait "${PIDS[etcd]}" 2>/dev/null
  # Every mount made in this namespace under the temporary folder or the bound folders,
  # deepest first (the namespace's end would drop them too).
  local m
  for _ in 1 2 3; do
    awk '{print $5}' /proc/self/mountinfo | grep -E "^($T|/run/containerd|/var/lib/kubelet|/var/log/pods|/var/log/containers|/var/lib/cni)(/|$)" \
      | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  done
  # Anything still alive in this PID namespace ends with its PID 1: this shell.
}

inner() {
  T=$1
  trap inner_teardown EXIT
  # Bind the fixed folders to the temporary folder, in this mount namespace only.
  local d
  for d in "${HOST_DIRS[@]}"; do
    mkdir -p "$T/host$d"
    mount --bind "$T/host$d" "$d"
  done

  # --- the network: lo and a dummy interface, no default route ---------------------------
  # This kernel has no dummy driver (ip link add ... type dummy: "Unknown device type"), so
  # the node address sits on one end of a veth pair whose both ends stay in this namespace.
  ip link set lo up
  ip link add node0 type veth peer name node0-peer
  ip addr add "$NODE_IP/24" dev node0
  ip link set node0-peer up
  ip link set node0 up
  [ -z "$(ip route show default)" ] || fail "the namespace has a default route"
  echo "network namespace: $(ip -brief addr | tr -s ' ' | paste -sd';')" >&2

  # --- PKI ----------------------------------------------------------------------------------
  mkdir -p "$T/pki"
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$T/pki/ca.key" -subj "/CN=bsl-cluster-test-ca" -days 2 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$T/pki/ca.crt" 2>/dev/null
  mkcert apiserver kube-apiserver "" serverAuth \
    "IP:127.0.0.1,IP:$NODE_IP,IP:${SERVICE_CIDR%.0/*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  mkcert admin admin system:masters clientAuth
  mkcert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
  mkcert kube-controller-manager system:kube-controller-manager "" clientAuth
  mkcert kube-scheduler system:kube-scheduler "" clientAuth
  mkcert kubelet "system:node:$NODE_NAME" system:nodes clientAuth
  openssl genrsa -out "$T/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$T/pki/sa.key" -pubout -out "$T/pki/sa.pub" 2>/dev/null
  kubeconfig admin https://127.0.0.1:6443
  kubeconfig kube-controller-manager https://127.0.0.1:6443
  kubeconfig kube-scheduler https://127.0.0.1:6443
  kubeconfig kubelet "https://$NODE_IP:6443"

  # --- control plane ------------------------------------------------------------------------
  # The audit log says who made each request and what the apiserver answered: the RBAC test
  # reads every request bsl-sentinel's ServiceAccount made.
  cat > "$T/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:velero"]
- level: None
EOF
  local t0
  t0=$(date +%s)
  start etcd "$KUBE_BIN/etcd" --data-dir "$T/etcd" --unsafe-no-fsync=true \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster default=http://127.0.0.1:2380
  wait_for 30 etcd curl -fsS http://127.0.0.1:2379/health
  start kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port=6443 \
    --tls-cert-file="$T/pki/apiserver.crt" --tls-private-key-file="$T/pki/apiserver.key" \
    --client-ca-file="$T/pki/ca.crt" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$T/pki/sa.pub" \
    --service-account-signing-key-file="$T/pki/sa.key" \
    --kubelet-client-certificate="$T/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$T/pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --enable-aggregator-routing=true \
    --audit-policy-file="$T/audit-policy.yaml" --audit-log-path="$T/logs/audit.log" \
    --audit-log-maxbackup=1 \
    --cert-dir="$T/apiserver" --profiling=false
  wait_for 90 kube-apiserver kc get --raw /readyz
  echo "control plane: apiserver ready in $(( $(date +%s) - t0 ))s" >&2
  start kube-controller-manager "$NODE_BIN/kube-controller-manager" \
    --kubeconfig="$T/pki/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$T/pki/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$T/pki/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$T/pki/sa.key" --root-ca-file="$T/pki/ca.crt" \
    --cluster-signing-cert-file="$T/pki/ca.crt" --cluster-signing-key-file="$T/pki/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --cert-dir="$T/kcm" --profiling=false
  start kube-scheduler "$NODE_BIN/kube-scheduler" \
    --kubeconfig="$T/pki/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$T/pki/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$T/pki/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --cert-dir="$T/scheduler" --profiling=false
  wait_for 60 kube-controller-manager curl -fsSk https://127.0.0.1:10257/healthz
  wait_for 60 kube-scheduler curl -fsSk https://127.0.0.1:10259/healthz

  # --- containerd ----------------------------------------------------------------------------
  mkdir -p "$T/containerd" "$T/cni/net.d" "$T/cdi"
  cat > "$T/containerd/config.toml" <<EOF
version = 3
root = "$T/containerd/root"
state = "$T/containerd/state"
temp = "$T/containerd/tmp"
[grpc]
  address = "$T/containerd/containerd.sock"
[ttrpc]
  address = "$T/containerd/containerd.sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$T/containerd/opt"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$PAUSE_IMAGE'
[plugins.'io.containerd.cri.v1.runtime']
  # This machine's root lacks CAP_SYS_RESOURCE (CapEff 000001fffeffffff), so runc fails to
  # lower a sandbox's oom_score_adj to the kubelet's -998 ("failed to update
  # /proc/self/oom_score_adj: Permission denied"): keep scores at or above containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ['$T/cdi']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$NODE_BIN/runc'
        Root = '$T/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$NODE_BIN/cni']
    conf_dir = '$T/cni/net.d'
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
EOF
  # Pods off the host network get 10.99.1.0/24 on a bridge; their only route is to 10.99/16.
  cat > "$T/cni/net.d/10-bsl-node.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "bsl-node", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$T/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "10.99.0.0/16"}]}}]}
EOF
  if [ "${CLUSTER_RUNC_DEBUG:-}" = 1 ]; then
    # runc's own log (the bundle's log.json) is gone once a create fails: keep a copy.
    cat > "$T/runc-debug" <<EOF
#!/bin/bash
echo "runc \$*" >> "$T/logs/runc-calls.log"
log=""; prev=""
for a in "\$@"; do [ "\$prev" = --log ] && log=\$a; prev=\$a; done
"$NODE_BIN/runc" --debug "\$@"
rc=\$?
if [ \$rc != 0 ] && [ -n "\$log" ]; then cat "\$log" >> "$T/logs/runc-failed.log"; fi
exit \$rc
EOF
    chmod +x "$T/runc-debug"
    sed -i "s|BinaryName = .*|BinaryName = '$T/runc-debug'|" "$T/containerd/config.toml"
  fi
  t0=$(date +%s)
  PATH="$NODE_BIN:$PATH" start containerd "$NODE_BIN/containerd" --config "$T/containerd/config.toml"
  local ctr=("$NODE_BIN/ctr" --address "$T/containerd/containerd.sock" -n k8s.io)
  wait_for 30 containerd "${ctr[@]}" version
  local img
  for img in "$T/images/"*.tar; do
    "${ctr[@]}" images import "$img" >&2 || fail "ctr images import $img failed" containerd
  done
  "${ctr[@]}" images ls -q >&2
  echo "containerd: ready and images imported in $(( $(date +%s) - t0 ))s" >&2

  # --- kubelet -------------------------------------------------------------------------------
  cat > "$T/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1; kubelet 1.35+ refuses it unless told not to.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CG
containerRuntimeEndpoint: unix://$T/containerd/containerd.sock
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$T/pki/ca.crt"}
authorization: {mode: Webhook}
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: /var/log/pods
serializeImagePulls: false
# How often each pod is synced, and so how soon a changed Secret reaches its volume (default 1m).
syncFrequency: 10s
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOF
  t0=$(date +%s)
  start kubelet "$NODE_BIN/kubelet" --config="$T/kubelet.yaml" \
    --kubeconfig="$T/pki/kubelet.kubeconfig" --root-dir=/var/lib/kubelet \
    --cert-dir=/var/lib/kubelet/pki --node-ip="$NODE_IP" --hostname-override="$NODE_NAME" --v=2
  wait_for 60 kubelet kc get node "$NODE_NAME"
  wait_for 120 kubelet node_ready
  echo "kubelet: node $NODE_NAME Ready in $(( $(date +%s) - t0 ))s" >&2
  kc get node -o wide >&2

  # --- cert-manager and the S3 server ----------------------------------------------------
  # Host processes of the node, like the control plane: cert-manager's controller and cainjector
  # as built today (no leader election: one of each), moto serving S3 on the node address.
  kc apply --server-side -f "$CERT_MANAGER_CRDS" >/dev/null
  kc wait --for=condition=Established --timeout=60s crd/certificates.cert-manager.io \
    crd/issuers.cert-manager.io crd/certificaterequests.cert-manager.io >/dev/null
  start cert-manager-controller "$CERT_MANAGER_BIN/cert-manager-controller" \
    --kubeconfig="$T/pki/admin.kubeconfig" --cluster-resource-namespace=kube-system \
    --leader-elect=false
  start cert-manager-cainjector "$CERT_MANAGER_BIN/cert-manager-cainjector" \
    --kubeconfig="$T/pki/admin.kubeconfig" --leader-elect=false
  start moto env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$MOTO_BIN" -H "$NODE_IP" -p 5000
  wait_for 60 moto curl -sS -o /dev/null "http://$NODE_IP:5000/"

  # --- the tests ---------------------------------------------------------------------------
  # shellcheck source=tests/cluster/tests.sh
  . "$REPO/tests/cluster/tests.sh"
  # shellcheck source=tests/cluster/helm.sh
  . "$REPO/tests/cluster/helm.sh"
  run_cluster_tests
}

if [ "${1:-}" = --inner ]; then
  shift
  inner "$@"
  exit $?
fi

# ---------------------------------------------------------------------------------------------
# Outside: build, prepare, run the namespaces, clean up.
# ---------------------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || die "tests/cluster/run.sh needs root (namespaces, mounts, cgroups)"
REPO=$(cd "$here/../.." && pwd)
binary=${1:-$REPO/target/release/bsl-sentinel}
[ -x "$binary" ] || die "no bsl-sentinel binary at $binary (cargo build --release, or give its path)"
for tool in ip nsenter unshare openssl curl; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing"
done

KUBE_BIN=$(bash "$peers/build-kube.sh")
NODE_BIN=$(bash "$peers/build-node.sh")
cert_manager=$(bash "$peers/build-cert-manager.sh")
CERT_MANAGER_BIN=$(sed -n 's/^bin=//p' <<<"$cert_manager")
CERT_MANAGER_CRDS=$(sed -n 's/^crds=//p' <<<"$cert_manager")
MOTO_BIN=$(bash "$peers/install-moto.sh" | tail -n1)
HELM_BIN=$(bash "$peers/build-helm.sh" | tail -n1)
T=$(mktemp -d /tmp/bsl-node.XXXXXX)
mkdir -p "$T/logs" "$T/images"
NS=bsl-node-$$
CG=bsl-node-$$
PAUSE_IMAGE="registry.k8s.io/pause:$(cat "$NODE_BIN/pause.version")"
# The tag tests/cluster/overlay sets: the one change the install makes to deploy/'s image.
BSL_IMAGE=docker.io/library/bsl-sentinel:cluster-test
export T KUBE_BIN NODE_BIN CERT_MANAGER_BIN CERT_MANAGER_CRDS MOTO_BIN HELM_BIN REPO NS CG PAUSE_IMAGE \
  BSL_IMAGE NODE_IP

bash "$peers/node-image.sh" "$binary" "$T/images/bsl-sentinel.tar" "$BSL_IMAGE" >/dev/null
mkdir -p "$T/pause-rootfs"
install -m 0755 "$NODE_BIN/pause" "$T/pause-rootfs/pause"
oci_archive "$T/pause-rootfs" "$T/images/pause.tar" "$PAUSE_IMAGE" 65535:65535 /pause ""

declare -A saved=()
created_dirs=()
cgroups=()
outer_cleanup() {
  set +e
  if [ -n "${inner_pid:-}" ] && kill -0 "$inner_pid" 2>/dev/null; then
    # unshare --kill-child: its child, PID 1 of the namespace, and so every process there, end.
    kill -KILL "$inner_pid" 2>/dev/null
    wait "$inner_pid" 2>/dev/null
  fi
  local c k d
  # The ones made here, and any that runc or the kubelet made under the same name elsewhere
  # (the cgroup v2 hierarchy of a hybrid mount).
  for c in "${cgroups[@]}" /sys/fs/cgroup/*/"$CG" "/sys/fs/cgroup/$CG"; do
    [ -d "$c" ] || continue
    # Processes left in the test's cgroups can only be the namespace's: gone, but wait for it.
    for _ in $(seq 20); do
      [ -z "$(find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break
      sleep 0.5
    done
    find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$c" ] && echo "warning: could not remove cgroup $c" >&2
  done
  for k in "${!saved[@]}"; do sysctl -qw "$k=${saved[$k]}" 2>/dev/null; done
  ip netns del "$NS" 2>/dev/null
  for d in "${created_dirs[@]}"; do
    # ip netns makes /run/netns a mount point of its own: undo that only if it is empty.
    if [ "$d" = /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
      while grep -q ' /run/netns ' /proc/self/mountinfo; do umount /run/netns || break; done
    fi
    rmdir "$d" 2>/dev/null
  done
  if grep -q " $T" /proc/self/mountinfo; then
    echo "warning: mounts left under $T:" >&2
    grep " $T" /proc/self/mountinfo >&2
  elif [ "${CLUSTER_KEEP:-}" != 1 ]; then
    find "$T" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
  fi
  echo "logs: $T/logs" >&2
}
trap outer_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for k in "${SYSCTLS[@]}"; do saved[$k]=$(sysctl -n "$k"); done
for d in "${HOST_DIRS[@]}"; do
  if [ ! -e "$d" ]; then mkdir -p "$d"; created_dirs+=("$d"); fi
done
# The kubelet's cgroup root, in every cgroup v1 hierarchy (it must exist beforehand).
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  mkdir "/sys/fs/cgroup/$CG" && cgroups+=("/sys/fs/cgroup/$CG")
else
  for h in /sys/fs/cgroup/*/; do
    [ "$(stat -fc %T "$h")" = cgroupfs ] || continue
    [ -e "$h/cgroup.procs" ] || continue
    mkdir "$h$CG" && cgroups+=("$h$CG")
    if [ -e "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h$CG/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h$CG/cpuset.mems"
    fi
  done
fi

[ -e /run/netns ] || created_dirs+=(/run/netns)
ip netns add "$NS"
progress "cluster: namespace $NS, temporary folder $T"
nsenter --net="/run/netns/$NS" \
  unshare --pid --fork --kill-child --mount --propagation private --mount-proc \
  bash "$here/run.sh" --inner "$T" > >(tee "$T/logs/cluster.log") 2>&1 &
inner_pid=$!
set +e
wait "$inner_pid"
rc=$?
set -e
inner_pid=""
progress "cluster: exit $rc after $SECONDS s (teardown follows)"
exit "$rc"
