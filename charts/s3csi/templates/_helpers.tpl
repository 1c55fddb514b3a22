{{/* Labels every object of the chart carries. */}}
{{- define "s3csi.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: s3csi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of one component: call with (dict "root" $ "component" "node-agent"). */}}
{{- define "s3csi.componentLabels" -}}
{{ include "s3csi.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Selector labels of one component; never change them, Deployments' selectors are immutable. */}}
{{- define "s3csi.selectorLabels" -}}
app.kubernetes.io/name: s3csi
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Image reference: call with (dict "root" $ "key" "nodeAgent"); a tag sha256:<hex> pins the
image by digest (<repository>@sha256:<hex>). */}}
{{- define "s3csi.image" -}}
{{- $img := .root.Values.image -}}
{{- $repo := index $img.repositories .key -}}
{{- $tag := default (default .root.Chart.AppVersion $img.tag) (index $img.tags .key) -}}
{{- $registry := include "s3csi.scality.value" (dict "root" .root "name" "image.registry") -}}
{{- $sep := hasPrefix "sha256:" $tag | ternary "@" ":" -}}
{{- if $registry -}}
{{ trimSuffix "/" $registry }}/{{ $repo }}{{ $sep }}{{ $tag }}
{{- else -}}
{{ $repo }}{{ $sep }}{{ $tag }}
{{- end -}}
{{- end }}

{{/* The endpoint (or Scality's node.s3EndpointUrl), refused with a clear message when missing. */}}
{{- define "s3csi.endpointUrl" -}}
{{- required "s3.endpointUrl is required: set it to the URL of your S3 service, e.g. --set s3.endpointUrl=https://s3.example.com" (include "s3csi.scality.value" (dict "root" . "name" "s3.endpointUrl")) -}}
{{- end }}

{{/* The signing region (or Scality's node.s3Region). */}}
{{- define "s3csi.region" -}}
{{- include "s3csi.scality.value" (dict "root" . "name" "s3.region") -}}
{{- end }}

{{/* NATS URL the services connect to: the external one, or the chart's Service. */}}
{{- define "s3csi.natsUrl" -}}
{{- if .Values.nats.external.url -}}
{{ .Values.nats.external.url }}
{{- else -}}
{{ ternary "tls" "nats" .Values.nats.tls.enabled }}://s3csi-nats.{{ .Release.Namespace }}.svc:4222
{{- end -}}
{{- end }}

{{/* "true" when the bundled NATS serves TLS (empty otherwise). */}}
{{- define "s3csi.natsBundledTLS" -}}
{{- if and .Values.nats.tls.enabled (not .Values.nats.external.url) -}}true{{- end -}}
{{- end }}

{{/* The Secret of the bundled NATS's CA and certificate. */}}
{{- define "s3csi.natsTLSSecret" -}}
{{- .Values.nats.tls.existingSecret | default "s3csi-nats-tls" -}}
{{- end }}

{{/* Flags every service shares: call with (dict "root" $ "values" .Values.node). */}}
{{- define "s3csi.commonArgs" -}}
- --admin-address=:{{ .values.adminPort }}
- --log-format={{ .root.Values.logFormat }}
- --log-level={{ .values.logLevel }}
{{- end }}

{{/* Replicas of the S3CSI_EVENTS stream: nats.streamReplicas, or derived from the chart's NATS
servers when 0 (see values.yaml); refused when the chart's NATS has fewer servers. */}}
{{- define "s3csi.natsStreamReplicas" -}}
{{- $n := int .Values.nats.streamReplicas -}}
{{- $servers := int .Values.nats.replicas -}}
{{- if and (eq $n 0) (not .Values.nats.external.url) -}}
{{- $n = min $servers 3 -}}
{{- end -}}
{{- if eq $n 0 -}}
{{- $n = 1 -}}
{{- end -}}
{{- if and (not .Values.nats.external.url) (gt $n $servers) -}}
{{- fail (printf "nats.streamReplicas %d needs at least as many NATS servers: raise nats.replicas (now %d) or lower nats.streamReplicas" $n $servers) -}}
{{- end -}}
{{ $n }}
{{- end }}

{{/* NATS_URL and NATS_STREAM_REPLICAS for every service. */}}
{{- define "s3csi.natsEnv" -}}
- name: NATS_URL
  value: {{ include "s3csi.natsUrl" . | quote }}
- name: NATS_STREAM_REPLICAS
  value: {{ include "s3csi.natsStreamReplicas" . | quote }}
{{- end }}

{{/* Pod annotations: Prometheus scrape hints for the admin port plus the user's own. */}}
{{- define "s3csi.podAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .values.adminPort | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Liveness on /healthz and readiness on /readyz of the admin server. */}}
{{- define "s3csi.probes" -}}
ports:
  - name: admin
    containerPort: {{ .adminPort }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
  initialDelaySeconds: 10
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 5
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}

{{/* Container security context of the unprivileged services (images run as uid 65532). */}}
{{- define "s3csi.restrictedContainer" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/* Scheduling fields of one component: call with (dict "root" $ "v" <its values>). */}}
{{- define "s3csi.scheduling" -}}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- include "s3csi.affinity" (dict "root" .root "affinity" .v.affinity) }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* affinity of one component, call with (dict "root" $ "affinity" <its affinity>): its own, with
every required node selector term also requiring a kubernetes.io/arch the images are built for
(image.architectures), so that no pod lands on a node whose architecture has no image. The terms
are alternatives: the requirement goes into each. */}}
{{- define "s3csi.affinity" -}}
{{- $aff := deepCopy (.affinity | default dict) }}
{{- with .root.Values.image.architectures }}
{{- $arch := dict "key" "kubernetes.io/arch" "operator" "In" "values" . }}
{{- $na := get $aff "nodeAffinity" | default dict }}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
{{- $terms := list }}
{{- range (get $req "nodeSelectorTerms" | default (list (dict))) }}
{{- $terms = append $terms (set (deepCopy .) "matchExpressions" (append (get . "matchExpressions" | default list) $arch)) }}
{{- end }}
{{- $_ := set $req "nodeSelectorTerms" $terms }}
{{- $_ = set $na "requiredDuringSchedulingIgnoredDuringExecution" $req }}
{{- $_ = set $aff "nodeAffinity" $na }}
{{- end }}
{{- with $aff }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* imagePullSecrets of the charted pods; each entry a name (as Scality's and AWS's charts take
them) or a {name: ...} object. */}}
{{- define "s3csi.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ if kindIs "string" . }}{{ . }}{{ else }}{{ .name }}{{ end }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Names of the Secrets the Mountpoint Pods pull their image with, comma-separated:
mountpointPod.imagePullSecrets, or when unset (null) those of imagePullSecrets. */}}
{{- define "s3csi.mountpointPullSecrets" -}}
{{- $mp := .Values.mountpointPod }}
{{- $secrets := .Values.imagePullSecrets }}
{{- if and (hasKey $mp "imagePullSecrets") (not (kindIs "invalid" $mp.imagePullSecrets)) }}
{{- $secrets = $mp.imagePullSecrets }}
{{- end }}
{{- $names := list }}
{{- range $secrets }}
{{- if kindIs "string" . }}{{ $names = append $names . }}{{ else }}{{ $names = append $names .name }}{{ end }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{/* Users of the bundled NATS; each is a key of the auth Secret (shared/events.Users): the
services, then the users of kubectl s3csi (audit reads the events, replay republishes them off
the live subjects). */}}
{{- define "s3csi.natsUsers" -}}
csi-controller pod-reconciler node-agent janitor audit replay
{{- end }}

{{/* Secret holding the services' NATS passwords. */}}
{{/* The Secret of the csi-controller's ownership-proof keys. */}}
{{- define "s3csi.ownershipKeysSecret" -}}
{{- .Values.controller.ownershipKeys.existingSecret | default "s3csi-ownership-keys" -}}
{{- end }}

{{- define "s3csi.natsAuthSecret" -}}
{{- if .Values.nats.auth.existingSecret -}}
{{ .Values.nats.auth.existingSecret }}
{{- else if .Values.nats.external.url -}}
{{- fail "nats.auth.existingSecret is required with nats.external.url: a Secret with one key per service (csi-controller, pod-reconciler, node-agent, janitor) holding its NATS password; or set nats.auth.enabled=false" -}}
{{- else -}}
s3csi-nats-auth
{{- end -}}
{{- end }}

{{/* The NATS user and credential files of one service: call with (dict "root" $ "service" "janitor"). */}}
{{- define "s3csi.natsAuthEnv" -}}
{{- if .root.Values.nats.auth.enabled }}
- name: NATS_USER
  value: {{ .service }}
- name: NATS_PASSWORD_FILE
  value: /etc/s3csi/nats/password
{{- end }}
{{- if include "s3csi.natsBundledTLS" .root }}
- name: NATS_TLS_CA_FILE
  value: /etc/s3csi/nats-tls/ca.crt
{{- end }}
{{- with .root.Values.nats.external.tls }}
{{- if and $.root.Values.nats.external.url .secretName }}
- name: NATS_TLS_CA_FILE
  value: /etc/s3csi/nats-tls/ca.crt
{{- if .clientCertificate }}
- name: NATS_TLS_CERT_FILE
  value: /etc/s3csi/nats-tls/tls.crt
- name: NATS_TLS_KEY_FILE
  value: /etc/s3csi/nats-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Mounts of s3csi.natsAuthVolumes; same argument. */}}
{{- define "s3csi.natsAuthVolumeMounts" -}}
{{- if .root.Values.nats.auth.enabled }}
- name: nats-auth
  mountPath: /etc/s3csi/nats
  readOnly: true
{{- end }}
{{- if or (and .root.Values.nats.external.url .root.Values.nats.external.tls.secretName) (include "s3csi.natsBundledTLS" .root) }}
- name: nats-tls
  mountPath: /etc/s3csi/nats-tls
  readOnly: true
{{- end }}
{{- end }}

{{/* The service's own password only (one key of the auth Secret), and the TLS files: the
bundled NATS's CA, or the external NATS's CA and client certificate. */}}
{{- define "s3csi.natsAuthVolumes" -}}
{{- if .root.Values.nats.auth.enabled }}
- name: nats-auth
  secret:
    secretName: {{ include "s3csi.natsAuthSecret" .root }}
    defaultMode: 0440
    items:
      - key: {{ .service }}
        path: password
{{- end }}
{{- if include "s3csi.natsBundledTLS" .root }}
- name: nats-tls
  secret:
    secretName: {{ include "s3csi.natsTLSSecret" .root }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- with .root.Values.nats.external.tls }}
{{- if and $.root.Values.nats.external.url .secretName }}
- name: nats-tls
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
      {{- if .clientCertificate }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The CA of the S3 endpoint, as JSON (read it with `include "s3csi.s3CA" . | fromJson`):
configMap, the ConfigMap of the release namespace that holds it, and key, its key there (empty
when no CA is set); data, the PEM when the chart renders that ConfigMap (s3csi-s3-ca) itself.
s3.caBundle and s3.caConfigMap are this chart's names; Scality CSI Driver v2.2's tls.caCertData
(PEM) and tls.caCertConfigMap (a ConfigMap whose key ca-bundle.crt holds it) are accepted alone.
Two names giving the CA fail the rendering: which one wins would be a guess.
*/}}
{{- define "s3csi.s3CA" -}}
{{- $tls := get .Values "tls" | default dict -}}
{{- $set := dict -}}
{{- range $name, $value := dict "s3.caBundle" (get .Values.s3 "caBundle") "s3.caConfigMap" (get .Values.s3 "caConfigMap") "tls.caCertData" (get $tls "caCertData") "tls.caCertConfigMap" (get $tls "caCertConfigMap") -}}
{{- if $value }}{{ $_ := set $set $name $value }}{{ end -}}
{{- end -}}
{{- $ours := without (keys $set | sortAlpha) "tls.caCertConfigMap" "tls.caCertData" -}}
{{- $scality := without (keys $set | sortAlpha) "s3.caBundle" "s3.caConfigMap" -}}
{{- if and $ours $scality -}}
{{- fail (printf "%s and %s both give the S3 endpoint's CA: set only %s (the Scality v2 names tls.caCertData and tls.caCertConfigMap are accepted only without s3.caBundle and s3.caConfigMap)" (join ", " $ours) (join ", " $scality) (join ", " $ours)) -}}
{{- end -}}
{{- if gt (len $ours) 1 -}}
{{- fail "s3.caBundle and s3.caConfigMap both give the S3 endpoint's CA: set one (s3.caBundle holds the PEM, s3.caConfigMap names a ConfigMap holding it under the key ca.crt)" -}}
{{- end -}}
{{- $data := or (get $set "s3.caBundle") (get $set "tls.caCertData") -}}
{{- if $data -}}
{{- if not (contains "-----BEGIN CERTIFICATE-----" $data) -}}
{{- fail (printf "%s holds no PEM certificate: give the CA's certificate file, e.g. --set-file %s=ca.pem" (first (concat $ours $scality)) (first (concat $ours $scality))) -}}
{{- end -}}
{{- dict "configMap" "s3csi-s3-ca" "key" "ca.crt" "data" $data | toJson -}}
{{- else if get $set "s3.caConfigMap" -}}
{{- dict "configMap" (get $set "s3.caConfigMap") "key" "ca.crt" | toJson -}}
{{- else if get $set "tls.caCertConfigMap" -}}
{{- dict "configMap" (get $set "tls.caCertConfigMap") "key" "ca-bundle.crt" | toJson -}}
{{- else -}}
{}
{{- end -}}
{{- end }}

{{/* Where the csi-controller and the node-agent read the S3 endpoint's CA. */}}
{{- define "s3csi.s3CAFile" -}}/etc/s3csi/s3-ca/ca.crt{{- end }}

{{/* The volume of the S3 endpoint's CA: call with the result of s3csi.s3CA. */}}
{{- define "s3csi.s3CAVolume" -}}
- name: s3-ca
  configMap:
    name: {{ .configMap }}
    items:
      - key: {{ .key }}
        path: ca.crt
{{- end }}
