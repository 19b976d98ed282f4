# shellcheck shell=bash
# The Helm install on the real node: the same checks as the kustomize install in tests.sh, with
# charts/bsl-sentinel and the real Helm (tests/peers/build-helm.sh; HELM_BIN is its folder).
# Sourced after tests.sh (kc, kv, wait_for, fail, two_ready, ready_pods, live_pods, bsl,
# malformed_bsl, phase_is, webhook_call_failures, log_lines, T, REPO, NODE_IP come from there
# and run.sh). The three run in this order after uninstall_keeps_velero_namespace_its_objects_
# and_bsl_status: Velero's namespace, its Secret and ConfigMap, the project's CRD, cert-manager
# and the BSLs the kustomize tests left are there; bsl-sentinel is not.

CHART=$REPO/charts/bsl-sentinel

# helm with its homes in the run's folder (never the user's) and the node's admin kubeconfig.
hm() {
  HELM_CACHE_HOME="$T/helm" HELM_CONFIG_HOME="$T/helm" HELM_DATA_HOME="$T/helm" \
    "$HELM_BIN/helm" --kubeconfig "$T/pki/admin.kubeconfig" "$@"
}

# What tests/cluster/overlay changes in deploy/, as values: the image the node imported, and
# the apiserver's address on the node (no kube-proxy there).
HELM_NODE_VALUES=(
  --set image.tag=cluster-test
  --set-json 'extraEnv=[{"name":"KUBERNETES_SERVICE_HOST","value":"10.99.0.1"},{"name":"KUBERNETES_SERVICE_PORT","value":"6443"}]'
)

# The malformed BSL is rejected by the webhook (reached through the Service, with
# cainjector's caBundle), naming each field, and the apiserver never failed calling it.
helm_malformed_is_rejected() {
  local from out
  from=$(log_lines)
  if out=$(malformed_bsl helm-malformed | kc apply -f - 2>&1); then fail "a malformed BSL was admitted: $out"; fi
  echo "$out"
  for needle in 'spec.provider: Required value' 'spec.objectStorage.bucket: Invalid value: "a/b"'; do
    grep -qF "$needle" <<<"$out" || fail "missing '$needle' in kubectl's answer"
  done
  [ "$(webhook_call_failures "$from")" = 0 ] || fail "the apiserver failed calling the webhook"
}

ca_injected() {
  local kind bundle ca
  ca=$(kv get secret bsl-sentinel-webhook-tls -o jsonpath='{.data.ca\.crt}' 2>/dev/null) || return 1
  [ -n "$ca" ] || return 1
  for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
    bundle=$(kc get "$kind" bsl-sentinel -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
    [ "$bundle" = "$ca" ] || return 1
  done
}

helm_three_ready() {
  [ "$(ready_pods | wc -l)" = 3 ] && [ "$(kv get pods -l "$SERVER" -o name | wc -l)" = 3 ]
}

test_helm_install_runs_two_ready_replicas_rejects_malformed_and_checks_bsls() {
  hm install bsl-sentinel "$CHART" -n velero "${HELM_NODE_VALUES[@]}" --wait --timeout 240s \
    || { kv get pods -o wide; kv describe pods -l "$SERVER" | tail -40; fail "helm install failed" kubelet; }
  wait_for 60 kubelet two_ready
  kv get pods -o wide
  # The chart never takes Velero's namespace.
  [ -z "$(kc get namespace velero -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')" ] \
    || fail "helm adopted namespace velero"
  wait_for 60 cert-manager-cainjector ca_injected
  helm_malformed_is_rejected
  # A BSL made while no bsl-sentinel ran (the kustomize uninstall test's) gets checked now, and
  # a new one is created Unknown and turns Available.
  wait_for 60 kubelet phase_is after-uninstall Available
  local phase
  phase=$(bsl helm-primary "http://$NODE_IP:5000" | kc create -f - -o jsonpath='{.status.phase}')
  [ "$phase" = Unknown ] || fail "created with phase '$phase', not the webhook's Unknown"
  wait_for 60 kubelet phase_is helm-primary Available
}

# Upgrade: three replicas and a shorter validation frequency; the webhook keeps rejecting, and
# a BSL fixed to reach the storage turns Available.
test_helm_upgrade_changes_replicas_and_args() {
  hm upgrade bsl-sentinel "$CHART" -n velero "${HELM_NODE_VALUES[@]}" --set replicas=3 \
    --set-json 'extraArgs=["--validation-frequency=5s"]' --wait --timeout 240s \
    || fail "helm upgrade failed" kubelet
  [ "$(kv get deployment bsl-sentinel -o jsonpath='{.spec.replicas}')" = 3 ] || fail "replicas are not 3"
  wait_for 120 kubelet helm_three_ready
  local pod args
  for pod in $(live_pods); do
    args=$(kv get pod "$pod" -o jsonpath='{.spec.containers[0].args}')
    [ "$args" = '["serve","--validation-frequency=5s"]' ] || fail "$pod runs with args $args"
  done
  hm history bsl-sentinel -n velero | grep -q 'Upgrade complete' || fail "no upgrade in helm history"
  helm_malformed_is_rejected
  wait_for 30 kubelet phase_is refused Unavailable
  bsl refused "http://$NODE_IP:5000" | kc apply -f -
  wait_for 30 kubelet phase_is refused Available
}

# helm uninstall (and the run-time objects, as the README says): bsl-sentinel's objects go;
# Velero's namespace, its objects, every BSL and its status stay, and BSLs can still be created.
test_helm_uninstall_keeps_velero_namespace_its_objects_and_bsl_status() {
  local before manifest
  before=$(bsl_phases)
  [ "$(jq length <<<"$before")" -ge 2 ] || fail "too few BSLs to tell: $before"
  manifest=$(hm get manifest bsl-sentinel -n velero)
  hm uninstall bsl-sentinel -n velero --wait --timeout 120s
  uninstalled_and_velero_kept "$before" "$(kc get -f - --ignore-not-found -o name <<<"$manifest" 2>&1)" \
    after-helm-uninstall
}
