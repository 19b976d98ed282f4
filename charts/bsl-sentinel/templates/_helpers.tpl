{{/* The namespace of every object: Velero's (never declared or owned by the chart). */}}
{{- define "bsl-sentinel.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* The labels every object carries, as deploy/kustomization.yaml sets them. */}}
{{- define "bsl-sentinel.labels" -}}
app.kubernetes.io/name: bsl-sentinel
app.kubernetes.io/part-of: velero
{{- end -}}

{{- define "bsl-sentinel.selector" -}}
app.kubernetes.io/name: bsl-sentinel
app.kubernetes.io/component: server
{{- end -}}

{{/*
The certificate the chart makes itself (certManager.enabled=false, no tls.existingSecret), as a
dict with crt, key and ca. An upgrade reuses the one in the cluster, so the caBundle stays.
*/}}
{{- define "bsl-sentinel.generatedCert" -}}
{{- $ns := include "bsl-sentinel.namespace" . -}}
{{- $existing := lookup "v1" "Secret" $ns "bsl-sentinel-webhook-tls" -}}
{{- if and $existing (index $existing.data "ca.crt") -}}
{{- dict "crt" (index $existing.data "tls.crt" | b64dec) "key" (index $existing.data "tls.key" | b64dec) "ca" (index $existing.data "ca.crt" | b64dec) | toJson -}}
{{- else -}}
{{- $days := int .Values.tls.validityDays -}}
{{- $ca := genCA "bsl-sentinel-webhook-ca" $days -}}
{{- $cn := printf "bsl-sentinel-webhook.%s.svc" $ns -}}
{{- $cert := genSignedCert $cn nil (list $cn (printf "%s.cluster.local" $cn)) $days $ca -}}
{{- dict "crt" $cert.Cert "key" $cert.Key "ca" $ca.Cert | toJson -}}
{{- end -}}
{{- end -}}
