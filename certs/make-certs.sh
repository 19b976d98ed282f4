#!/usr/bin/env bash
# Certificates for bsl-sentinel's webhook on a cluster without cert-manager.
#
#   certs/make-certs.sh [NAMESPACE] [OUTDIR] | kubectl apply -f -
#
# NAMESPACE (default velero) is where bsl-sentinel runs; OUTDIR (default ./bsl-sentinel-certs)
# receives the files. The script:
#   1. makes a CA (OUTDIR/ca.crt, ca.key), or reuses the one already in OUTDIR, so that running
#      it again renews the serving certificate while the caBundle stays the same;
#   2. makes a serving certificate (OUTDIR/tls.crt, tls.key) for the Service
#      bsl-sentinel-webhook: bsl-sentinel-webhook.NAMESPACE.svc (the name the apiserver calls)
#      and .svc.cluster.local;
#   3. creates or updates the Secret bsl-sentinel-webhook-tls (tls.crt, tls.key, ca.crt) in
#      NAMESPACE with kubectl, for the current context of KUBECONFIG;
#   4. prints the two webhook configurations of webhook-config/ with caBundle set to the CA and
#      the Service namespace set to NAMESPACE (also written to OUTDIR/webhook-configurations.yaml).
#
# Progress goes to stderr, the configurations to stdout. Needs openssl and kubectl (set KUBECTL
# to use another kubectl binary). Certificate lifetimes: CA_DAYS (default 3650) and DAYS
# (default 365); run the script again before DAYS run out.
set -euo pipefail

namespace=${1:-velero}
outdir=${2:-./bsl-sentinel-certs}
kubectl=${KUBECTL:-kubectl}
ca_days=${CA_DAYS:-3650}
days=${DAYS:-365}
service=bsl-sentinel-webhook
secret=bsl-sentinel-webhook-tls
here=$(cd "$(dirname "$0")" && pwd)
config_dir="$here/../webhook-config"

say() { printf 'make-certs: %s\n' "$*" >&2; }
die() { printf 'make-certs: error: %s\n' "$*" >&2; exit 1; }

command -v openssl >/dev/null 2>&1 || die "openssl is missing (Debian/Ubuntu: apt-get install openssl)"
command -v "$kubectl" >/dev/null 2>&1 || die "kubectl ($kubectl) is missing: install it or set KUBECTL"
[[ "$namespace" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "not a namespace name: $namespace"
for f in validating.yaml mutating.yaml; do
  [ -f "$config_dir/$f" ] || die "missing $config_dir/$f"
done

mkdir -p "$outdir"
umask 077
cd "$outdir"

if [ -s ca.crt ] && [ -s ca.key ]; then
  say "reusing the CA in $outdir (remove ca.crt and ca.key for a new one)"
else
  say "making a CA in $outdir (valid $ca_days days)"
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days "$ca_days" -out ca.crt \
    -subj "/CN=bsl-sentinel-webhook-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" 2>/dev/null
fi

dns1="$service.$namespace.svc"
dns2="$service.$namespace.svc.cluster.local"
say "making the serving certificate for $dns1 and $dns2 (valid $days days)"
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out tls.key
openssl req -new -key tls.key -out tls.csr -subj "/CN=$dns1" 2>/dev/null
cat > tls.ext <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:$dns1,DNS:$dns2
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash
EXT
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days "$days" \
  -extfile tls.ext -out tls.crt 2>/dev/null
rm -f tls.csr tls.ext ca.srl
openssl verify -CAfile ca.crt tls.crt >/dev/null || die "the new serving certificate does not verify against ca.crt"

say "writing Secret $namespace/$secret"
"$kubectl" create secret generic "$secret" --namespace "$namespace" --type kubernetes.io/tls \
  --from-file=tls.crt=tls.crt --from-file=tls.key=tls.key --from-file=ca.crt=ca.crt \
  --dry-run=client -o yaml \
  | "$kubectl" apply -f - >&2 \
  || die "cannot write Secret $namespace/$secret (does namespace $namespace exist? is KUBECONFIG right?)"

# caBundle goes into each clientConfig; the only `namespace:` key in these files is the
# Service's (the configurations themselves are cluster-scoped).
ca_bundle=$(base64 < ca.crt | tr -d '\n')
render() {
  awk -v ca="$ca_bundle" -v ns="$namespace" '
    /^ *namespace: *velero *$/ { sub(/velero/, ns) }
    { print }
    /^ *clientConfig: *$/ {
      match($0, /^ */)
      printf "%*scaBundle: %s\n", RLENGTH + 2, "", ca
    }
  ' "$1"
}
{
  render "$config_dir/validating.yaml"
  echo "---"
  render "$config_dir/mutating.yaml"
} > webhook-configurations.yaml
say "webhook configurations with caBundle in $outdir/webhook-configurations.yaml"
cat webhook-configurations.yaml
