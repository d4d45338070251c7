{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "statestore.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release name + chart name unless the release name already contains it. */}}
{{- define "statestore.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of the headless Service that gives each StatefulSet pod a stable DNS name. */}}
{{- define "statestore.headlessName" -}}
{{- printf "%s-headless" (include "statestore.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/*
Sharding. The shard templates are rendered once per shard with the shard's number set as .shard on
the root context. With shards: 1 every name and label is what an unsharded release has.
*/}}
{{- define "statestore.sharded" -}}
{{- if gt (int .Values.shards) 1 }}true{{ end }}
{{- end }}

{{/* The StatefulSet, client Service and PDB of the current shard: <fullname>-<shard> when sharded. */}}
{{- define "statestore.shardName" -}}
{{- if include "statestore.sharded" . }}
{{- printf "%s-%d" (include "statestore.fullname" . | trunc 48 | trimSuffix "-") (int .shard) }}
{{- else }}
{{- include "statestore.fullname" . }}
{{- end }}
{{- end }}

{{/* The headless Service of the current shard. */}}
{{- define "statestore.shardHeadlessName" -}}
{{- if include "statestore.sharded" . }}
{{- printf "%s-headless" (include "statestore.shardName" .) }}
{{- else }}
{{- include "statestore.headlessName" . }}
{{- end }}
{{- end }}

{{/* Labels selecting the pods of the current shard (every pod when unsharded). */}}
{{- define "statestore.shardSelectorLabels" -}}
{{ include "statestore.selectorLabels" . }}
{{- if include "statestore.sharded" . }}
statestore.io/shard: {{ .shard | quote }}
{{- end }}
{{- end }}

{{/* Labels of the current shard's objects. */}}
{{- define "statestore.shardLabels" -}}
{{ include "statestore.labels" . }}
{{- if include "statestore.sharded" . }}
statestore.io/shard: {{ .shard | quote }}
{{- end }}
{{- end }}

{{/* Pods of each shard: replicasPerShard, else replicaCount. */}}
{{- define "statestore.replicas" -}}
{{- if kindIs "invalid" .Values.replicasPerShard }}{{ .Values.replicaCount }}{{ else }}{{ .Values.replicasPerShard }}{{ end }}
{{- end }}

{{/* The base URL clients use: one Service, or a template naming each shard's Service by {shard}. */}}
{{- define "statestore.clientUrl" -}}
{{- $name := include "statestore.fullname" . }}
{{- if include "statestore.sharded" . }}
{{- $name = printf "%s-{shard}" ($name | trunc 48 | trimSuffix "-") }}
{{- end }}
{{- printf "%s://%s.%s.svc:%v" (include "statestore.scheme" . | lower) $name .Release.Namespace .Values.service.port }}
{{- end }}

{{- define "statestore.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "statestore.selectorLabels" -}}
app.kubernetes.io/name: {{ include "statestore.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "statestore.labels" -}}
helm.sh/chart: {{ include "statestore.chart" . }}
{{ include "statestore.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: server
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the helm test Pod: not the selector labels, so no Service or policy selects it. */}}
{{- define "statestore.testLabels" -}}
helm.sh/chart: {{ include "statestore.chart" . }}
app.kubernetes.io/name: {{ include "statestore.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: test
{{ include "statestore.clientLabel" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The label that lets a pod reach the HTTP port when networkPolicy.allowExternal is false. */}}
{{- define "statestore.clientLabel" -}}
{{ include "statestore.fullname" . | trunc 56 | trimSuffix "-" }}-client: "true"
{{- end }}

{{- define "statestore.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "statestore.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* registry/repository:tag, or registry/repository@digest when a digest is given. */}}
{{- define "statestore.image" -}}
{{- $repository := .Values.image.repository }}
{{- with .Values.image.registry }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Whether to leave the UID, GID and fsGroup to the platform (compatibility.openshift). */}}
{{- define "statestore.platformAssignsIds" -}}
{{- $mode := .Values.compatibility.openshift.adaptSecurityContext }}
{{- if or (eq $mode "force") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1")) }}true{{ end }}
{{- end }}

{{/* The pod's security context, without the ids a platform assigns when it assigns them. */}}
{{- define "statestore.podSecurityContext" -}}
{{- if include "statestore.platformAssignsIds" . }}
{{- toYaml (omit .Values.podSecurityContext "runAsUser" "runAsGroup" "fsGroup" "fsGroupChangePolicy" "seLinuxOptions") }}
{{- else }}
{{- toYaml .Values.podSecurityContext }}
{{- end }}
{{- end }}

{{/* The containers' security context, likewise. */}}
{{- define "statestore.securityContext" -}}
{{- if include "statestore.platformAssignsIds" . }}
{{- toYaml (omit .Values.securityContext "runAsUser" "runAsGroup" "seLinuxOptions") }}
{{- else }}
{{- toYaml .Values.securityContext }}
{{- end }}
{{- end }}

{{/* The distinct ports of kafka.bootstrapServers (HOST:PORT,...; Kafka's 9092 when left out), one per line. */}}
{{- define "statestore.kafkaPorts" -}}
{{- $ports := list }}
{{- range splitList "," .Values.kafka.bootstrapServers }}
{{- $port := regexFind ":[0-9]+$" (trim .) | trimPrefix ":" | default "9092" }}
{{- if not (has $port $ports) }}
{{- $ports = append $ports $port }}
{{- end }}
{{- end }}
{{- join "\n" $ports }}
{{- end }}

{{/* The store the helm test reads. */}}
{{- define "statestore.testStore" -}}
{{- .Values.helmTest.store | default (first .Values.stores).name }}
{{- end }}

{{/* http or https, following http.tls.enabled. */}}
{{- define "statestore.scheme" -}}
{{- if .Values.http.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/*
Environment variable that overrides one librdkafka setting: the service reads
STATESTORE_KAFKA__<KEY> with the dots of the key written as underscores.
*/}}
{{- define "statestore.kafkaEnvName" -}}
{{- printf "STATESTORE_KAFKA__%s" (. | upper | replace "." "_" | replace "-" "_") }}
{{- end }}

{{/* Whether the chart generates the token: auth on, and neither tokens nor certificates given. */}}
{{- define "statestore.generatesToken" -}}
{{- if and (eq .Values.auth.mode "tokens") (not .Values.auth.tokens) (not .Values.auth.certificates) }}true{{ end }}
{{- end }}

{{/* The Secret holding the generated token (key token) and the service's list of its hash (key tokens.yaml). */}}
{{- define "statestore.tokenSecretName" -}}
{{- printf "%s-token" (include "statestore.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/* Where the pod mounts the generated token's list; auth.tokens_file names it. */}}
{{- define "statestore.tokensFile" -}}
/etc/statestore/auth/tokens.yaml
{{- end }}

{{/* The kubernetes.io/tls Secret of the listener: the given one, else the one cert-manager fills. */}}
{{- define "statestore.tlsSecretName" -}}
{{- if .Values.http.tls.existingSecret }}
{{- .Values.http.tls.existingSecret }}
{{- else if .Values.http.tls.certManager.enabled }}
{{- printf "%s-tls" (include "statestore.fullname" . | trunc 59 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/* Where the service finds the clients' CA bundle (mTLS). */}}
{{- define "statestore.clientCaFile" -}}
{{- if .Values.http.tls.clientCA.existingSecret }}
{{- printf "/etc/statestore/client-ca/%s" .Values.http.tls.clientCA.key }}
{{- else }}
{{- "/etc/statestore/http-tls/ca.crt" }}
{{- end }}
{{- end }}

{{/* Whether the token list is delivered through the environment (hashes from a Secret). */}}
{{- define "statestore.tokensFromSecret" -}}
{{- if and (eq .Values.auth.mode "tokens") .Values.auth.existingSecret }}true{{ end }}
{{- end }}

{{/* Refuse values that would put a secret into the ConfigMap, or that cannot work. */}}
{{- define "statestore.validate" -}}
{{- range $key, $_ := .Values.kafka.config }}
{{- $lower := lower $key }}
{{- if or (contains "password" $lower) (contains "secret" $lower) (contains "private" $lower) (contains "ssl.key.pem" $lower) }}
{{- fail (printf "kafka.config.%s looks secret and would land in the ConfigMap: put it in the Secret named by kafka.credentials.existingSecret and map it under kafka.credentials.keys" $key) }}
{{- end }}
{{- if or (eq $lower "bootstrap.servers") (eq $lower "bootstrap_servers") }}
{{- fail "set the Kafka bootstrap servers with kafka.bootstrapServers, not kafka.config" }}
{{- end }}
{{- end }}
{{- if and .Values.http.tls.enabled (not (include "statestore.tlsSecretName" .)) }}
{{- fail "http.tls.enabled needs http.tls.existingSecret (the name of a kubernetes.io/tls Secret) or http.tls.certManager.enabled" }}
{{- end }}
{{- if and .Values.http.tls.certManager.enabled (not .Values.http.tls.certManager.issuerRef.name) }}
{{- fail "http.tls.certManager.enabled needs http.tls.certManager.issuerRef.name: the cert-manager Issuer or ClusterIssuer that signs the certificates" }}
{{- end }}
{{- if and .Values.http.tls.clientCA.enabled (not .Values.http.tls.enabled) }}
{{- fail "http.tls.clientCA.enabled needs http.tls.enabled: client certificates are asked for in the TLS handshake" }}
{{- end }}
{{- if and .Values.auth.certificates (not .Values.http.tls.clientCA.enabled) }}
{{- fail "auth.certificates needs http.tls.clientCA.enabled: without a CA bundle no client certificate is asked for" }}
{{- end }}
{{- range .Values.auth.certificates }}
{{- if and .secretName (not $.Values.http.tls.certManager.enabled) }}
{{- fail (printf "auth certificate %q has a secretName, which cert-manager fills: set http.tls.certManager.enabled" .name) }}
{{- end }}
{{- end }}
{{- if not (has .Values.auth.mode (list "open" "tokens")) }}
{{- fail (printf "auth.mode must be open or tokens, got %q" .Values.auth.mode) }}
{{- end }}
{{- range .Values.auth.tokens }}
{{- if and .secretKey (not $.Values.auth.existingSecret) }}
{{- fail (printf "auth token %q takes its hash from secretKey but auth.existingSecret is empty" .name) }}
{{- end }}
{{- if not (or .secretKey .sha256) }}
{{- fail (printf "auth token %q needs secretKey (a key in auth.existingSecret) or sha256" .name) }}
{{- end }}
{{- if not .stores }}
{{- fail (printf "auth token %q names no stores: list the stores it may read, or stores: [\"*\"] for every store" .name) }}
{{- end }}
{{- end }}
{{- if and (eq (.Values.auth.metrics | default "open") "token") (ne .Values.auth.mode "tokens") }}
{{- fail "auth.metrics is token but auth.mode is open: set auth.mode to tokens" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (eq (.Values.auth.metrics | default "open") "token") (not .Values.serviceMonitor.bearerTokenSecret) }}
{{- fail "auth.metrics is token: give the ServiceMonitor a token with serviceMonitor.bearerTokenSecret (name, key)" }}
{{- end }}
{{- if not .Values.stores }}
{{- fail "stores is empty: list at least one store (name, topic, value_format)" }}
{{- end }}
{{- end }}

{{/*
The container's environment: Kafka credentials and token hashes from Secrets (they override the
ConfigMap's file), then extraEnv.
*/}}
{{- define "statestore.env" -}}
{{- if include "statestore.sharded" . }}
# This pod's shard: it materializes the partitions p with p % shards == shard.
- name: STATESTORE_SHARDING__SHARDS
  value: {{ .Values.shards | quote }}
- name: STATESTORE_SHARDING__SHARD
  value: {{ .shard | quote }}
{{- end }}
{{- with .Values.kafka.credentials.existingSecret }}
{{- $secret := . }}
{{- range $setting, $key := $.Values.kafka.credentials.keys }}
- name: {{ include "statestore.kafkaEnvName" $setting }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- if include "statestore.tokensFromSecret" . }}
{{- $tokens := list }}
{{- range $index, $token := .Values.auth.tokens }}
{{- if $token.secretKey }}
- name: {{ printf "AUTH_TOKEN_SHA256_%d" $index }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.auth.existingSecret }}
      key: {{ $token.secretKey }}
{{- $tokens = append $tokens (dict "name" $token.name "stores" $token.stores "sha256" (printf "$(AUTH_TOKEN_SHA256_%d)" $index)) }}
{{- else }}
{{- $tokens = append $tokens (dict "name" $token.name "stores" $token.stores "sha256" $token.sha256) }}
{{- end }}
{{- end }}
# The token list, with each hash expanded by the kubelet from the variable above it.
- name: STATESTORE_AUTH__TOKENS
  value: {{ $tokens | toJson | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
