# shellcheck shell=bash
# The cluster tests. tests/cluster/run.sh sources this inside the node's namespaces once the
# node is Ready (kc, wait_for, fail, T, REPO, NODE_IP, NODE_NAME come from there) and calls
# run_cluster_tests. Each test runs in a subshell of its own with `set -e`: a failed check ends
# that test, and the next one still runs. They share one cluster and run in the order of
# CLUSTER_ORDER, each building on the install the first ones make, as an operator would go.

CLUSTER_ORDER=(
  image_matches_the_dockerfile
  install_runs_two_ready_replicas_as_nonroot_with_a_read_only_root
  a_malformed_bsl_is_rejected_through_the_service_naming_each_field
  a_valid_bsl_gets_unknown_then_its_phase_from_storage_reached_from_the_pod
  a_renewed_certificate_is_served_without_a_restart
  deleting_the_lease_holder_hands_over_within_the_lease_duration
  a_rollout_restart_under_load_loses_no_create_and_no_review
  a_drain_respects_the_pod_disruption_budget
  it_runs_as_its_serviceaccount_and_nothing_is_forbidden
  uninstall_keeps_velero_namespace_its_objects_and_bsl_status
  # tests/cluster/helm.sh: the same install with the Helm chart, on what uninstall left.
  helm_install_runs_two_ready_replicas_rejects_malformed_and_checks_bsls
  helm_upgrade_changes_replicas_and_args
  helm_uninstall_keeps_velero_namespace_its_objects_and_bsl_status
)

OVERLAY=$REPO/tests/cluster/overlay
SERVER=app.kubernetes.io/component=server
SA_USER=system:serviceaccount:velero:bsl-sentinel
WEBHOOK_DNS=bsl-sentinel-webhook.velero.svc

# --- helpers -----------------------------------------------------------------------------------
kv() { kc -n velero "$@"; }
# Server pods that are not on their way out, one name per line.
live_pods() {
  kv get pods -l "$SERVER" -o json \
    | jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name'
}
ready_pods() {
  kv get pods -l "$SERVER" -o json | jq -r '.items[]
    | select(.metadata.deletionTimestamp == null)
    | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))
    | .metadata.name'
}
two_ready() { [ "$(ready_pods | wc -l)" = 2 ] && [ "$(kv get pods -l "$SERVER" -o name | wc -l)" = 2 ]; }
pod_ip() { kv get pod "$1" -o jsonpath='{.status.podIP}'; }
bsl_phase() { kv get bsl "$1" -o jsonpath='{.status.phase}'; }
phase_is() { [ "$(bsl_phase "$1")" = "$2" ]; }
# bsl NAME S3URL: a BSL on moto, with Velero's credential Secret.
bsl() {
  cat <<EOF
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: $1, namespace: velero, labels: {test: ${3:-cluster}}}
spec:
  provider: aws
  objectStorage: {bucket: backups}
  credential: {name: cloud-credentials, key: cloud}
  config: {region: us-east-1, s3ForcePathStyle: "true", s3Url: "$2"}
EOF
}
malformed_bsl() {
  cat <<EOF
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: ${1:-malformed}, namespace: velero}
spec: {provider: "", objectStorage: {bucket: a/b}}
EOF
}
# The apiserver's complaints about calling a webhook, counted from line $1 of its log.
webhook_call_failures() {
  tail -n +"$(( ${1:-0} + 1 ))" "$T/logs/kube-apiserver.log" | grep -ciE 'failed calling webhook|failing open' || true
}
log_lines() { wc -l < "$T/logs/kube-apiserver.log"; }
# served_fingerprint IP: the SHA-256 fingerprint of the leaf the webhook serves there, checked
# against the CA and for the Service's name, as the apiserver checks it.
served_fingerprint() {
  local out
  out=$(openssl s_client -connect "$1:8443" -servername "$WEBHOOK_DNS" -verify_hostname "$WEBHOOK_DNS" \
    -CAfile "$T/webhook-ca.crt" -verify_return_error </dev/null 2>/dev/null) || return 1
  openssl x509 -noout -fingerprint -sha256 <<<"$out" | cut -d= -f2
}
secret_fingerprint() {
  kv get secret bsl-sentinel-webhook-tls -o jsonpath='{.data.tls\.crt}' | base64 -d \
    | openssl x509 -noout -fingerprint -sha256 | cut -d= -f2
}
# The pod's Secret volume, as the kubelet laid it out (its ..data link names the current version).
tls_volume() {
  echo "/var/lib/kubelet/pods/$(kv get pod "$1" -o jsonpath='{.metadata.uid}')/volumes/kubernetes.io~secret/tls"
}
restarts() { kv get pods -l "$SERVER" -o jsonpath='{range .items[*]}{.metadata.name}={.status.containerStatuses[0].restartCount}{"\n"}{end}' | sort; }

# --- the tests ---------------------------------------------------------------------------------

# The offline image and the Dockerfile's final stage agree on what a user sees of the image.
test_image_matches_the_dockerfile() {
  python3 - "$REPO/Dockerfile" "$T/images/bsl-sentinel.tar" <<'EOF'
import json, shlex, sys, tarfile
dockerfile, archive = sys.argv[1], sys.argv[2]
# The Dockerfile's final stage, continuation lines joined.
lines, joined = [], ""
for raw in open(dockerfile):
    line = raw.rstrip("\n")
    if line.lstrip().startswith("#"):
        continue
    joined += line.rstrip("\\")
    if not line.endswith("\\"):
        if joined.strip():
            lines.append(joined.strip())
        joined = ""
final = lines[max(i for i, l in enumerate(lines) if l.upper().startswith("FROM ")):]
want = {"copies": []}
for l in final[1:]:
    word, _, rest = l.partition(" ")
    word = word.upper()
    if word == "USER": want["user"] = rest
    elif word == "EXPOSE": want["ports"] = sorted(p if "/" in p else p + "/tcp" for p in rest.split())
    elif word == "ENTRYPOINT": want["entrypoint"] = json.loads(rest)
    elif word == "CMD": want["cmd"] = json.loads(rest)
    elif word == "COPY": want["copies"].append(shlex.split(rest)[-1])
tar = tarfile.open(archive)
blob = lambda d: tar.extractfile("./blobs/" + d.replace(":", "/"))
index = json.load(tar.extractfile("./index.json"))
manifest = json.load(blob(index["manifests"][0]["digest"]))
config = json.load(blob(manifest["config"]["digest"]))["config"]
got = {"user": config.get("User"), "ports": sorted(config.get("ExposedPorts", {})),
       "entrypoint": config.get("Entrypoint"), "cmd": config.get("Cmd")}
errors = [f"{k}: Dockerfile {want.get(k)!r}, image {got[k]!r}" for k in got if want.get(k) != got[k]]
layer = tarfile.open(fileobj=blob(manifest["layers"][0]["digest"]))
files = {m.name.lstrip("./"): m for m in layer.getmembers()}
for path in want["copies"]:
    m = files.get(path.lstrip("/"))
    if m is None or not m.isfile() or not m.mode & 0o111:
        errors.append(f"{path}: not an executable file in the image")
# What distroless's nonroot base gives a program: the CA bundle, the nonroot user, /tmp.
passwd = layer.extractfile(files["etc/passwd"]).read().decode()
if "nonroot:x:65532:65532:" not in passwd:
    errors.append("/etc/passwd has no nonroot 65532")
for path in ["etc/ssl/certs/ca-certificates.crt", "tmp", "home/nonroot"]:
    if path not in files:
        errors.append(f"/{path} missing")
print("image:", got, "copies", want["copies"])
if errors:
    sys.exit("image differs from the Dockerfile:\n  " + "\n  ".join(errors))
EOF
}

# Velero's side first (its namespace, a credential Secret, a ConfigMap of its own), then the
# install as the README says it, with cert-manager issuing the certificate.
test_install_runs_two_ready_replicas_as_nonroot_with_a_read_only_root() {
  kc create namespace velero
  kv create secret generic cloud-credentials --from-literal=cloud="$(printf '[default]\naws_access_key_id = AKIAMOTOTESTKEY00000\naws_secret_access_key = moto-test-secret-key\n')"
  kv create configmap velero-own-settings --from-literal=owner=velero
  kc apply -k "$REPO/deploy/crd/"
  kc wait --for=condition=Established --timeout=60s crd/backupstoragelocations.velero.io
  kc apply -k "$OVERLAY"
  if ! kv rollout status deployment/bsl-sentinel --timeout=240s; then
    kv get pods -o wide; kv describe pods -l "$SERVER" | tail -40
    fail "the Deployment did not become available" kubelet
  fi
  wait_for 60 kubelet two_ready
  kv get pods -o wide
  [ "$(restarts | grep -cv '=0$')" = 0 ] || fail "a replica restarted: $(restarts)"
  # What the node made of the securityContext, read from the processes themselves.
  local pid n=0
  for pid in $(pgrep -x bsl-sentinel); do
    n=$((n + 1))
    local uid
    uid=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")
    [ "$uid" = "65532 65532 65532 65532" ] || fail "process $pid runs as uid $uid"
    # The container's root: mount point "/" in its own mount namespace, options field 6.
    awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | tr ',' '\n' | grep -qx ro \
      || fail "process $pid: its root filesystem is writable ($(awk '$5 == "/"' "/proc/$pid/mountinfo"))"
    echo "process $pid: uid $uid, root filesystem read-only"
  done
  [ "$n" = 2 ] || fail "expected 2 bsl-sentinel processes, found $n"
}

test_a_malformed_bsl_is_rejected_through_the_service_naming_each_field() {
  local from out bundle
  from=$(log_lines)
  # The webhooks call the Service (no URL), and cainjector put the certificate's CA in them.
  for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
    [ "$(kc get "$kind" bsl-sentinel -o jsonpath='{.webhooks[0].clientConfig.service.name}')" = bsl-sentinel-webhook ] \
      || fail "$kind does not call the Service"
    bundle=$(kc get "$kind" bsl-sentinel -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
    [ -n "$bundle" ] || fail "$kind has no caBundle (cainjector)"
    [ "$bundle" = "$(kv get secret bsl-sentinel-webhook-tls -o jsonpath='{.data.ca\.crt}')" ] \
      || fail "$kind's caBundle is not the certificate's CA"
  done
  base64 -d <<<"$bundle" > "$T/webhook-ca.crt"
  # Each replica serves cert-manager's certificate, valid for the Service's name.
  local pod
  for pod in $(live_pods); do
    [ "$(served_fingerprint "$(pod_ip "$pod")")" = "$(secret_fingerprint)" ] \
      || fail "$pod does not serve the Secret's certificate for $WEBHOOK_DNS"
  done
  # failurePolicy is Ignore: only a webhook that was reached and answered can reject this.
  if out=$(malformed_bsl | kc apply -f - 2>&1); then fail "a malformed BSL was admitted: $out"; fi
  echo "$out"
  # The webhook answers like the apiserver's own validation (reason Invalid, one cause per
  # field), in its own words: the CRD's schema allows this object.
  for needle in 'The BackupStorageLocation "malformed" is invalid' \
      'spec.provider: Required value: set the object store plugin' \
      'spec.objectStorage.bucket: Invalid value: "a/b": bucket must not contain'; do
    grep -qF "$needle" <<<"$out" || fail "missing '$needle' in kubectl's answer"
  done
  [ "$(webhook_call_failures "$from")" = 0 ] || fail "the apiserver failed calling the webhook"
}

test_a_valid_bsl_gets_unknown_then_its_phase_from_storage_reached_from_the_pod() {
  curl -fsS -X PUT "http://$NODE_IP:5000/backups" -o /dev/null
  local phase
  phase=$(bsl primary "http://$NODE_IP:5000" | kc create -f - -o jsonpath='{.status.phase}')
  [ "$phase" = Unknown ] || fail "created with phase '$phase', not the webhook's Unknown"
  phase=$(bsl refused "http://$NODE_IP:9" | kc create -f - -o jsonpath='{.status.phase}')
  [ "$phase" = Unknown ] || fail "created with phase '$phase', not the webhook's Unknown"
  wait_for 60 kubelet phase_is primary Available
  wait_for 60 kubelet phase_is refused Unavailable
  kv get bsl -o wide
  kv get bsl refused -o jsonpath='{.status.message}'; echo
  [ -n "$(kv get bsl primary -o jsonpath='{.status.lastValidationTime}')" ] || fail "no lastValidationTime"
}

# cert-manager renews (forced the way `cmctl renew` does it: the Issuing condition), the kubelet
# swaps the Secret volume's ..data, and each replica serves the new certificate to new
# connections, without a restart.
test_a_renewed_certificate_is_served_without_a_restart() {
  local before pods_before restarts_before pod
  before=$(secret_fingerprint)
  pods_before=$(live_pods | sort)
  restarts_before=$(restarts)
  declare -A data=()
  for pod in $pods_before; do data[$pod]=$(readlink "$(tls_volume "$pod")/..data"); done
  kv patch certificate bsl-sentinel-webhook --subresource=status --type=json -p "[{\"op\": \"add\",
    \"path\": \"/status/conditions/-\", \"value\": {\"type\": \"Issuing\", \"status\": \"True\",
    \"reason\": \"ManuallyTriggered\", \"message\": \"renewal forced by the cluster test\",
    \"lastTransitionTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}}]"
  secret_renewed() { [ "$(secret_fingerprint)" != "$before" ]; }
  wait_for 90 cert-manager-controller secret_renewed
  local after
  after=$(secret_fingerprint)
  echo "certificate renewed: $before -> $after"
  for pod in $pods_before; do
    local dir
    dir=$(tls_volume "$pod")
    volume_updated() {
      [ "$(readlink "$dir/..data")" != "${data[$pod]}" ] \
        && [ "$(openssl x509 -noout -fingerprint -sha256 -in "$dir/tls.crt" | cut -d= -f2)" = "$after" ]
    }
    wait_for 90 kubelet volume_updated
    echo "$pod: ..data ${data[$pod]} -> $(readlink "$dir/..data")"
    local ip
    ip=$(pod_ip "$pod")
    serves_new() { [ "$(served_fingerprint "$ip")" = "$after" ]; }
    wait_for 60 kubelet serves_new
    echo "$pod: serves the renewed certificate"
  done
  [ "$(live_pods | sort)" = "$pods_before" ] || fail "the pods changed: $(live_pods)"
  [ "$(restarts)" = "$restarts_before" ] || fail "restarts: $restarts_before -> $(restarts)"
  local out
  if out=$(malformed_bsl | kc apply -f - 2>&1); then fail "admitted after the renewal: $out"; fi
  grep -qF 'spec.provider: Required value' <<<"$out" || fail "not rejected by the webhook: $out"
}

test_deleting_the_lease_holder_hands_over_within_the_lease_duration() {
  local holder other duration
  holder=$(kv get lease bsl-sentinel -o jsonpath='{.spec.holderIdentity}')
  duration=$(kv get lease bsl-sentinel -o jsonpath='{.spec.leaseDurationSeconds}')
  live_pods | grep -qx "$holder" || fail "the Lease holder '$holder' is not a server pod"
  other=$(live_pods | grep -vx "$holder")
  [ -n "$other" ] || fail "no second replica"
  local t0 now new=""
  t0=$(date +%s%N)
  kv delete pod "$holder" --wait=false
  while :; do
    new=$(kv get lease bsl-sentinel -o jsonpath='{.spec.holderIdentity}')
    now=$(date +%s%N)
    if [ -n "$new" ] && [ "$new" != "$holder" ]; then break; fi
    (( (now - t0) / 1000000000 <= duration + 5 )) || fail "no new holder $(( (now - t0) / 1000000 )) ms after the delete"
    sleep 0.2
  done
  local ms=$(( (now - t0) / 1000000 ))
  echo "Lease: $holder -> $new in $ms ms (lease duration ${duration}s)"
  # The standby watches the Lease: it takes a released Lease before the replacement pod that
  # the ReplicaSet starts at once is up.
  [ "$new" = "$other" ] || fail "the Lease went to $new, not to the other replica $other"
  (( ms <= duration * 1000 )) || fail "hand-over took $ms ms, more than the lease duration"
  bsl after-handover "http://$NODE_IP:5000" | kc create -f -
  wait_for 60 kubelet phase_is after-handover Available
  wait_for 120 kubelet two_ready
}

# Valid BSLs and malformed ones in a loop while the Deployment rolls: every valid create must
# succeed with the mutating webhook's Unknown, every malformed one must be rejected (a webhook
# that was not reached fails open: failurePolicy Ignore).
test_a_rollout_restart_under_load_loses_no_create_and_no_review() {
  local from load="$T/load.log" stop="$T/load.stop"
  from=$(log_lines)
  : > "$load"
  rm -f "$stop"
  (
    set +e
    i=0
    while [ ! -e "$stop" ]; do
      i=$((i + 1))
      if phase=$(bsl "load-$i" "http://$NODE_IP:5000" load | kc create -f - -o jsonpath='{.status.phase}' 2>&1); then
        echo "valid load-$i created phase=$phase" >> "$load"
      else
        echo "valid load-$i LOST $phase" | tr '\n' ' ' >> "$load"; echo >> "$load"
      fi
      if out=$(malformed_bsl "bad-$i" | kc create -f - 2>&1); then
        echo "malformed bad-$i ADMITTED" >> "$load"
      elif grep -qF 'spec.provider: Required value' <<<"$out"; then
        echo "malformed bad-$i rejected" >> "$load"
      else
        echo "malformed bad-$i ERROR $out" | tr '\n' ' ' >> "$load"; echo >> "$load"
      fi
    done
  ) &
  local loader=$!
  sleep 3
  local before
  before=$(live_pods | sort)
  kv rollout restart deployment/bsl-sentinel
  kv rollout status deployment/bsl-sentinel --timeout=300s || { kill "$loader"; fail "the rollout did not finish"; }
  old_gone() { [ -z "$(comm -12 <(kv get pods -l "$SERVER" -o name | sed 's|^pod/||' | sort) <(echo "$before"))" ]; }
  wait_for 90 kubelet old_gone
  sleep 3
  touch "$stop"
  wait "$loader"
  local valid lost unmutated admitted errors
  valid=$(grep -c '^valid' "$load" || true)
  lost=$(grep -c ' LOST' "$load" || true)
  unmutated=$(grep '^valid .* created' "$load" | grep -vc 'phase=Unknown$' || true)
  admitted=$(grep -c ' ADMITTED' "$load" || true)
  errors=$(grep -c '^malformed .* ERROR' "$load" || true)
  echo "rollout: $valid valid creates ($lost lost, $unmutated without the webhook's phase)," \
    "$(grep -c '^malformed' "$load") malformed ($admitted admitted, $errors other errors)," \
    "$(webhook_call_failures "$from") failed webhook calls in the apiserver's log"
  grep -E 'LOST|ADMITTED|ERROR' "$load" | head -5 || true
  (( valid >= 10 )) || fail "only $valid creates during the rollout: too few to tell"
  [ "$lost" = 0 ] && [ "$unmutated" = 0 ] && [ "$admitted" = 0 ] && [ "$errors" = 0 ] \
    || fail "the rollout lost creates or reviews"
  [ "$(webhook_call_failures "$from")" = 0 ] || fail "the apiserver failed calling the webhook"
  [ "$(kv get bsl -l test=load -o name | wc -l)" = "$valid" ] || fail "not every created BSL exists"
  kv delete bsl -l test=load --wait=false >/dev/null
}

test_a_drain_respects_the_pod_disruption_budget() {
  local out rc=0
  wait_for 60 kubelet two_ready
  out=$(kc drain "$NODE_NAME" --pod-selector="$SERVER" --ignore-daemonsets --timeout=30s 2>&1) || rc=$?
  echo "$out" | tail -5
  [ "$rc" != 0 ] || fail "drain evicted both replicas of a PDB with minAvailable 1"
  grep -q "violate the pod's disruption budget" <<<"$out" || fail "drain did not stop at the PDB"
  [ "$(ready_pods | wc -l)" = 1 ] || fail "expected one replica left serving, found: $(ready_pods)"
  # The one left still serves reviews through the Service.
  if out=$(malformed_bsl | kc apply -f - 2>&1); then fail "admitted during the drain: $out"; fi
  grep -qF 'spec.provider: Required value' <<<"$out" || fail "not rejected during the drain: $out"
  kc uncordon "$NODE_NAME"
  wait_for 120 kubelet two_ready
}

# Over the whole run so far: every request the ServiceAccount made (the apiserver's audit log)
# and every line the replicas logged (copied from the node while they ran).
test_it_runs_as_its_serviceaccount_and_nothing_is_forbidden() {
  python3 - "$T/logs/audit.log" "$SA_USER" <<'EOF'
import collections, json, sys
path, user = sys.argv[1], sys.argv[2]
seen, denied, others = collections.Counter(), [], collections.Counter()
for line in open(path):
    e = json.loads(line)
    name = e["user"]["username"]
    if name != user:
        others[name] += 1
        continue
    ref = e.get("objectRef", {})
    code = e.get("responseStatus", {}).get("code", 0)
    seen[(e["verb"], ref.get("resource", e.get("requestURI")), ref.get("subresource", ""))] += 1
    if code == 403:
        denied.append(f'{e["verb"]} {e.get("requestURI")}: {e["responseStatus"].get("message", "")}')
for (verb, resource, sub), n in sorted(seen.items()):
    print(f"  {user}: {verb} {resource}{'/' + sub if sub else ''} x{n}")
if others:
    print("  other users of the velero ServiceAccounts:", dict(others))
if sum(seen.values()) == 0:
    sys.exit(f"no request by {user} in the audit log")
for want in [("update", "leases"), ("patch", "backupstoragelocations"), ("watch", "backupstoragelocations")]:
    if not any((v, r) == want for v, r, _ in seen):
        sys.exit(f"{user} never made a {want[0]} of {want[1]}: is it really the one running?")
if denied:
    sys.exit("Forbidden:\n  " + "\n  ".join(denied))
EOF
  local files
  files=$(find "$T/logs/pods" -name '*.log' 2>/dev/null | wc -l)
  (( files >= 4 )) || fail "only $files replica logs were collected"
  if grep -rih forbidden "$T/logs/pods"; then fail "a replica logged Forbidden"; fi
  echo "$files replica logs, no Forbidden"
}

# The README's uninstall: bsl-sentinel's objects go; Velero's namespace, its objects, the BSLs
# and their status stay, and BSLs can still be created.
test_uninstall_keeps_velero_namespace_its_objects_and_bsl_status() {
  local before
  before=$(bsl_phases)
  [ "$(jq length <<<"$before")" -ge 2 ] || fail "too few BSLs to tell: $before"
  kc delete -k "$OVERLAY" --wait=true
  uninstalled_and_velero_kept "$before" "$(kc get -k "$OVERLAY" --ignore-not-found -o name 2>&1)" \
    after-uninstall
}

# Each BSL's name and phase, as JSON.
bsl_phases() {
  kv get bsl -o json | jq -c '[.items[] | select(.metadata.deletionTimestamp == null)
    | {name: .metadata.name, phase: .status.phase}] | sort_by(.name)'
}

# uninstalled_and_velero_kept BEFORE LEFT NEW: after the uninstall's first command, its second
# (the run-time objects), then: no pod, nothing of the install LEFT, nor of the run-time
# objects; Velero's namespace and objects there, the BSLs' phases still BEFORE, and BSL NEW
# can be created.
uninstalled_and_velero_kept() {
  local before=$1 left=$2 new=$3
  kv delete lease,configmap,secret -l app.kubernetes.io/name=bsl-sentinel
  no_pods() { [ -z "$(kv get pods -l "$SERVER" -o name)" ]; }
  wait_for 90 kubelet no_pods
  [ -z "$left" ] || fail "left after uninstall: $left"
  for object in lease/bsl-sentinel configmap/bsl-sentinel-status secret/bsl-sentinel-webhook-tls secret/bsl-sentinel-ca; do
    [ -z "$(kv get "$object" --ignore-not-found -o name)" ] || fail "$object is left after uninstall"
  done
  [ "$(kc get namespace velero -o jsonpath='{.status.phase}{.metadata.deletionTimestamp}')" = Active ] \
    || fail "namespace velero is going: $(kc get namespace velero -o yaml)"
  kv get secret cloud-credentials -o name
  kv get configmap velero-own-settings -o name
  local after
  after=$(bsl_phases)
  [ "$after" = "$before" ] || fail "the BSLs changed: $before -> $after"
  echo "BSLs kept: $after"
  bsl "$new" "http://$NODE_IP:5000" | kc create -f -
}

# --- the runner --------------------------------------------------------------------------------
run_cluster_tests() {
  local selected=("${CLUSTER_ORDER[@]}") name rc passed=0 failed=0 failures=()
  if [ -n "${CLUSTER_TESTS:-}" ]; then read -ra selected <<<"$CLUSTER_TESTS"; fi
  # The replicas' logs, copied while they run: the kubelet deletes a pod's logs with the pod.
  mkdir -p "$T/logs/pods"
  (set +e; while sleep 1; do cp -a /var/log/pods/velero_bsl-sentinel-* "$T/logs/pods/" 2>/dev/null; done) &
  set +e
  for name in "${selected[@]}"; do
    echo "--- cluster::$name"
    ( set -e; "test_$name" )
    rc=$?
    if [ "$rc" = 0 ]; then
      passed=$((passed + 1)); echo "test cluster::$name ... ok"
    else
      failed=$((failed + 1)); failures+=("$name"); echo "test cluster::$name ... FAILED"
    fi
  done
  set -e
  [ "$failed" = 0 ] || printf 'failed: cluster::%s\n' "${failures[@]}"
  echo "cluster: $passed passed, $failed failed"
  [ "$failed" = 0 ]
}
