{{/* Names. */}}
{{- define "kvindex.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvindex.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-router, <fullname>-agent: leaves room for the StatefulSet pod suffix. */}}
{{- define "kvindex.router.fullname" -}}
{{- printf "%s-router" (include "kvindex.fullname" . | trunc 50 | trimSuffix "-") -}}
{{- end -}}
{{/* The Secret holding the API token: the given one, else the generated one; "" when router.auth.enabled is false. */}}
{{- define "kvindex.router.authSecret" -}}
{{- if .Values.router.auth.enabled -}}
{{- .Values.router.auth.existingSecret | default (printf "%s-api-token" (include "kvindex.router.fullname" .)) -}}
{{- end -}}
{{- end -}}
{{- define "kvindex.agent.fullname" -}}
{{- printf "%s-agent" (include "kvindex.fullname" . | trunc 50 | trimSuffix "-") -}}
{{- end -}}

{{- define "kvindex.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvindex.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels. */}}
{{- define "kvindex.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kvindex.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvindex
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "router"). */}}
{{- define "kvindex.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvindex.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kvindex.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
A scalar as an environment value: whole numbers without an exponent
(YAML numbers arrive as float64), lists comma-joined, booleans as true/false.
*/}}
{{- define "kvindex.envValue" -}}
{{- if kindIs "slice" . -}}
{{- $items := list -}}
{{- range . }}{{ $items = append $items (include "kvindex.envValue" .) }}{{ end -}}
{{- join "," $items -}}
{{- else if kindIs "float64" . -}}
{{- if eq (floor .) . -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
`config` maps (flag name in snake_case -> value) as KVINDEX_<NAME> variables.
Null values and empty lists are left out (the binary's default applies).
*/}}
{{- define "kvindex.configEnv" -}}
{{- range $key, $value := . }}
{{- if not (or (kindIs "invalid" $value) (and (kindIs "slice" $value) (empty $value))) }}
- name: KVINDEX_{{ $key | upper | replace "-" "_" }}
  value: {{ include "kvindex.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Default key of the NATS credential in its Secret, per auth type. */}}
{{- define "kvindex.natsAuthKey" -}}
{{- $auth := .Values.nats.auth -}}
{{- if $auth.secretKey -}}{{ $auth.secretKey }}
{{- else if eq $auth.type "creds" -}}nats.creds
{{- else if eq $auth.type "nkey" -}}nkey.seed
{{- else if eq $auth.type "token" -}}token
{{- else -}}password
{{- end -}}
{{- end -}}

{{/* Checks of combinations the schema cannot express well; fail with a clear message. */}}
{{- define "kvindex.validate" -}}
{{- $auth := .Values.nats.auth -}}
{{- if and (ne $auth.type "none") (not $auth.existingSecret) -}}
{{- fail (printf "nats.auth.type=%s needs nats.auth.existingSecret" $auth.type) -}}
{{- end -}}
{{- if and (eq $auth.type "userPassword") (not $auth.user) -}}
{{- fail "nats.auth.type=userPassword needs nats.auth.user" -}}
{{- end -}}
{{- if and .Values.nats.tls.enabled (not .Values.nats.tls.existingSecret) -}}
{{- fail "nats.tls.enabled needs nats.tls.existingSecret" -}}
{{- end -}}
{{- if and .Values.agent.enabled (empty .Values.agent.sources) -}}
{{- fail "agent.enabled needs at least one entry in agent.sources" -}}
{{- end -}}
{{- if and .Values.router.autoscaling.enabled (gt (int .Values.router.autoscaling.minReplicas) (int .Values.router.autoscaling.maxReplicas)) -}}
{{- fail "router.autoscaling.minReplicas must not exceed maxReplicas" -}}
{{- end -}}
{{- if and (eq $auth.type "none") (not .Values.security.allowInsecureNats) -}}
{{- fail "nats.auth.type=none: without NATS credentials anyone who reaches NATS may publish on the stream and fake, wipe or silence any node's data; set nats.auth (docs/deploy.md) or, knowingly, security.allowInsecureNats: true" -}}
{{- end -}}
{{- end -}}

{{/* NATS connection, stream and secret-file variables shared by both binaries. */}}
{{- define "kvindex.natsEnv" -}}
{{- $nats := .Values.nats -}}
{{- if $nats.urlSecret.name }}
- name: KVINDEX_NATS
  valueFrom:
    secretKeyRef:
      name: {{ $nats.urlSecret.name | quote }}
      key: {{ $nats.urlSecret.key | quote }}
{{- else }}
- name: KVINDEX_NATS
  value: {{ $nats.url | quote }}
{{- end }}
- name: KVINDEX_STREAM
  value: {{ $nats.stream.name | quote }}
- name: KVINDEX_STREAM_PREFIX
  value: {{ $nats.stream.prefix | quote }}
- name: KVINDEX_STREAM_REPLICAS
  value: {{ include "kvindex.envValue" $nats.stream.replicas | quote }}
- name: KVINDEX_STREAM_STORAGE
  value: {{ $nats.stream.storage | quote }}
- name: KVINDEX_STREAM_MAX_AGE
  value: {{ $nats.stream.max_age | quote }}
- name: KVINDEX_STREAM_MAX_BYTES
  value: {{ include "kvindex.envValue" $nats.stream.max_bytes | quote }}
- name: KVINDEX_STREAM_DUPLICATE_WINDOW
  value: {{ $nats.stream.duplicate_window | quote }}
{{- $auth := $nats.auth }}
{{- $file := printf "/etc/kvindex/nats-auth/%s" (include "kvindex.natsAuthKey" .) }}
{{- if eq $auth.type "creds" }}
- name: KVINDEX_NATS_CREDS_FILE
  value: {{ $file | quote }}
{{- else if eq $auth.type "nkey" }}
- name: KVINDEX_NATS_NKEY_SEED_FILE
  value: {{ $file | quote }}
{{- else if eq $auth.type "token" }}
- name: KVINDEX_NATS_TOKEN_FILE
  value: {{ $file | quote }}
{{- else if eq $auth.type "userPassword" }}
- name: KVINDEX_NATS_USER
  value: {{ $auth.user | quote }}
- name: KVINDEX_NATS_PASSWORD_FILE
  value: {{ $file | quote }}
{{- end }}
{{- if $nats.tls.enabled }}
- name: KVINDEX_NATS_TLS_CA
  value: {{ printf "/etc/kvindex/nats-tls/%s" $nats.tls.caKey | quote }}
{{- if $nats.tls.clientCert }}
- name: KVINDEX_NATS_TLS_CERT
  value: {{ printf "/etc/kvindex/nats-tls/%s" $nats.tls.certKey | quote }}
- name: KVINDEX_NATS_TLS_KEY
  value: {{ printf "/etc/kvindex/nats-tls/%s" $nats.tls.keyKey | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kvindex.natsVolumeMounts" -}}
{{- if ne .Values.nats.auth.type "none" }}
- name: kvindex-nats-auth
  mountPath: /etc/kvindex/nats-auth
  readOnly: true
{{- end }}
{{- if .Values.nats.tls.enabled }}
- name: kvindex-nats-tls
  mountPath: /etc/kvindex/nats-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/*
Secret volumes of the NATS credential and TLS files. Call with
(dict "root" $ "mode" "0440"): group-readable for pods whose fsGroup is the
kvindex group; the sidecar snippet uses 0444, since the engine pod it is
pasted into may set no fsGroup.
*/}}
{{- define "kvindex.natsVolumes" -}}
{{- $nats := .root.Values.nats -}}
{{- $mode := .mode -}}
{{- $root := .root -}}
{{- if ne $nats.auth.type "none" }}
- name: kvindex-nats-auth
  secret:
    secretName: {{ $nats.auth.existingSecret | quote }}
    defaultMode: {{ $mode }}
    items:
      - key: {{ include "kvindex.natsAuthKey" $root | quote }}
        path: {{ include "kvindex.natsAuthKey" $root | quote }}
{{- end }}
{{- if $nats.tls.enabled }}
- name: kvindex-nats-tls
  secret:
    secretName: {{ $nats.tls.existingSecret | quote }}
    defaultMode: {{ $mode }}
    items:
      - key: {{ $nats.tls.caKey | quote }}
        path: {{ $nats.tls.caKey | quote }}
{{- if $nats.tls.clientCert }}
      - key: {{ $nats.tls.certKey | quote }}
        path: {{ $nats.tls.certKey | quote }}
      - key: {{ $nats.tls.keyKey | quote }}
        path: {{ $nats.tls.keyKey | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* One --source value per entry, joined with ';' (KVINDEX_SOURCE). */}}
{{- define "kvindex.agent.sources" -}}
{{- $specs := list -}}
{{- range .Values.agent.sources -}}
{{- $parts := list (printf "worker=%s" .worker) (printf "engine=%s" .engine) (printf "model=%s" .model) (printf "block_size=%s" (include "kvindex.envValue" .block_size)) (printf "pub=%s" .pub) -}}
{{- if .replay }}{{ $parts = append $parts (printf "replay=%s" .replay) }}{{ end -}}
{{- if hasKey . "dp_ranks" }}{{ $parts = append $parts (printf "dp_ranks=%s" (include "kvindex.envValue" .dp_ranks)) }}{{ end -}}
{{- if hasKey . "dp_rank" }}{{ $parts = append $parts (printf "dp_rank=%s" (include "kvindex.envValue" .dp_rank)) }}{{ end -}}
{{- if .report_mode }}{{ $parts = append $parts (printf "report_mode=%s" .report_mode) }}{{ end -}}
{{- if .endpoint }}{{ $parts = append $parts (printf "endpoint=%s" .endpoint) }}{{ end -}}
{{- $specs = append $specs (join "," $parts) -}}
{{- end -}}
{{- join ";" $specs -}}
{{- end -}}

{{/*
The agent container: the DaemonSet runs it, and the sidecar ConfigMap holds
the same container for engine pods. Call with (dict "root" $ "sidecar" bool).
*/}}
{{- define "kvindex.agent.container" -}}
{{- $root := .root -}}
{{- $values := $root.Values -}}
name: kvindex-agent
image: {{ include "kvindex.image" $root | quote }}
imagePullPolicy: {{ $values.image.pullPolicy }}
command:
  - kvindex-agent
env:
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
  - name: NODE_IP
    valueFrom:
      fieldRef:
        fieldPath: status.hostIP
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: POD_IP
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
  - name: KVINDEX_NODE
    {{- if .sidecar }}
    value: "$(POD_NAME)"
    {{- else }}
    value: "$(NODE_NAME)"
    {{- end }}
  - name: KVINDEX_HTTP
    value: {{ printf "0.0.0.0:%d" (int $values.agent.httpPort) | quote }}
  - name: KVINDEX_SOURCE
    value: {{ include "kvindex.agent.sources" $root | quote }}
  {{- include "kvindex.natsEnv" $root | trim | nindent 2 }}
  {{- with (include "kvindex.configEnv" $values.agent.config) }}{{ . | trim | nindent 2 }}{{- end }}
{{- $port := ternary "kvindex-agent" "http" (.sidecar | default false) }}
ports:
  - name: {{ $port }}
    containerPort: {{ $values.agent.httpPort }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ $port }}
  {{- toYaml $values.agent.livenessProbe | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ $port }}
  {{- toYaml $values.agent.readinessProbe | nindent 2 }}
resources:
  {{- toYaml $values.agent.resources | nindent 2 }}
securityContext:
  {{- toYaml $values.securityContext | nindent 2 }}
volumeMounts:
  - name: kvindex-tmp
    mountPath: /tmp
  {{- with (include "kvindex.natsVolumeMounts" $root) }}{{ . | trim | nindent 2 }}{{- end }}
{{- end -}}

{{/* Volumes of the agent container: call with (dict "root" $ "sidecar" bool). */}}
{{- define "kvindex.agent.volumes" -}}
- name: kvindex-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- with (include "kvindex.natsVolumes" (dict "root" .root "mode" (ternary "0444" "0440" .sidecar))) }}{{ . | trim | nindent 0 }}{{- end }}
{{- end -}}

{{/* Egress of both workloads: NATS and DNS. */}}
{{- define "kvindex.networkPolicy.egress" -}}
{{- $np := .root.Values.networkPolicy }}
# NATS only ...
- to:
    {{- toYaml $np.nats.to | nindent 4 }}
  ports:
    {{- range $np.nats.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
# ... plus DNS.
- to:
    {{- toYaml $np.dns.to | nindent 4 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end -}}

{{/* The endpoint picker on the router container (epp.enabled): its env and ports. */}}
{{- define "kvindex.sglang.routerEnv" -}}
{{- if .Values.sglangIndexer.enabled -}}
- name: KVINDEX_SGLANG_INDEXER
  value: {{ printf "0.0.0.0:%d" (int .Values.sglangIndexer.port) | quote }}
{{- with .Values.sglangIndexer.model }}
- name: KVINDEX_SGLANG_MODEL
  value: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}
{{- define "kvindex.sglang.routerPorts" -}}
{{- if .Values.sglangIndexer.enabled -}}
- name: sglang-indexer
  containerPort: {{ .Values.sglangIndexer.port }}
  protocol: TCP
{{- end -}}
{{- end -}}
{{- define "kvindex.epp.routerEnv" -}}
{{- if .Values.epp.enabled -}}
- name: KVINDEX_EPP
  value: {{ printf "0.0.0.0:%d" (int .Values.epp.port) | quote }}
- name: KVINDEX_EPP_HEALTH
  value: {{ printf "0.0.0.0:%d" (int .Values.epp.healthPort) | quote }}
{{- with (include "kvindex.configEnv" .Values.epp.config) }}
{{ . | trim }}
{{- end }}
{{- end -}}
{{- end -}}
{{/* A router probe: with epp.enabled, grpc.health.v1 on the EPP health port
(service "liveness" or "readiness", the same states as /healthz and /readyz:
docs/epp.md, "Health"), else HTTP on the router's port.
Arguments: (list $ "liveness"|"readiness" "/healthz"|"/readyz"). */}}
{{- define "kvindex.router.probe" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.epp.enabled -}}
grpc:
  port: {{ int $root.Values.epp.healthPort }}
  service: {{ index . 1 }}
{{- else -}}
httpGet:
  path: {{ index . 2 }}
  port: http
{{- end -}}
{{- end -}}
{{- define "kvindex.epp.routerPorts" -}}
{{- if .Values.epp.enabled -}}
- name: epp
  containerPort: {{ .Values.epp.port }}
  protocol: TCP
- name: epp-health
  containerPort: {{ .Values.epp.healthPort }}
  protocol: TCP
{{- end -}}
{{- end -}}
