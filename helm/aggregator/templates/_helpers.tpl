{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "aggregator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name, plus the chart name
unless the release name already contains it.
*/}}
{{- define "aggregator.fullname" -}}
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

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "aggregator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels on every object.
*/}}
{{- define "aggregator.labels" -}}
helm.sh/chart: {{ include "aggregator.chart" . }}
{{ include "aggregator.selectorLabels" . }}
app.kubernetes.io/version: {{ include "aggregator.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: aggregator
app.kubernetes.io/part-of: {{ include "aggregator.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the release's pods; immutable once deployed.
*/}}
{{- define "aggregator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aggregator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount the pods run as.
*/}}
{{- define "aggregator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "aggregator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "aggregator.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Image reference; a digest pins it.
*/}}
{{- define "aggregator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "aggregator.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
Port of config.http.listen: the container, probe and Service port. A
loopback address fails the render: the service accepts it with a warning
(a sound choice on a laptop), but in a pod the kubelet's probes and
Prometheus's scrapes come from outside it, and the rollout would stall.
*/}}
{{- define "aggregator.metricsPort" -}}
{{- $listen := dig "http" "listen" ":9090" .Values.config }}
{{- if regexMatch `^(127\.|localhost:|\[::1\]:)` $listen }}
{{- fail (printf "config.http.listen %q: a loopback address answers only inside the pod, so the probes and scrapes fail; use :PORT to listen on every interface" $listen) }}
{{- end }}
{{- regexFind "[0-9]+$" $listen }}
{{- end }}

{{/*
The consumer group: config.source.group, or the release's full name, so
that two releases never share a group or (through its default name) a
changelog topic.
*/}}
{{- define "aggregator.group" -}}
{{- dig "source" "group" "" .Values.config | default (include "aggregator.fullname" .) }}
{{- end }}

{{/*
Where the Secrets are mounted.
*/}}
{{- define "aggregator.tlsDir" -}}/etc/aggregator/tls{{- end }}
{{- define "aggregator.saslDir" -}}/etc/aggregator/sasl{{- end }}
{{- define "aggregator.schemaRegistryDir" -}}/etc/aggregator/schema-registry{{- end }}
{{- define "aggregator.oauthDir" -}}/etc/aggregator/oauth{{- end }}
{{- define "aggregator.oauthTokenDir" -}}/etc/aggregator/oauth-token{{- end }}

{{/*
The service config: .Values.config plus the file paths of the mounted
Secrets. Rendered once, so the ConfigMap and the checksum annotation agree.
*/}}
{{- define "aggregator.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $source := $cfg.source | default dict }}
{{- $_ := set $cfg "source" $source }}
{{- $_ := set $source "group" (include "aggregator.group" .) }}
{{- /* state.config_version orders configs across a rollout (docs/changing-config.md): the
release revision unless the values give one. A rollback is a new revision,
so a new version with the old settings. */}}
{{- $state := $cfg.state | default dict }}
{{- $_ := set $cfg "state" $state }}
{{- if not (hasKey $state "config_version") }}
{{- $_ := set $state "config_version" .Release.Revision }}
{{- end }}
{{- /* state.standby_replicas (docs/scaling.md#standby-state): a warm copy of
each state partition on another pod, so that a pod's partitions move to a
copy that reads only the changelog's tail. Set whatever replicaCount says:
with one pod there is no other pod for a copy (none is kept, nothing is
spent), and a config that followed replicaCount would roll every pod when
the Deployment scales from one pod to two. Unless the values give one. */}}
{{- if not (hasKey $state "standby_replicas") }}
{{- $_ := set $state "standby_replicas" 1 }}
{{- end }}
{{- with .Values.auth.tls }}
{{- if .existingSecret }}
{{- $tls := $source.tls | default dict }}
{{- $_ := set $tls "enabled" true }}
{{- if .caKey }}
{{- $_ := set $tls "ca_file" (printf "%s/%s" (include "aggregator.tlsDir" $) .caKey) }}
{{- end }}
{{- if .certKey }}
{{- $_ := set $tls "cert_file" (printf "%s/%s" (include "aggregator.tlsDir" $) .certKey) }}
{{- $_ := set $tls "key_file" (printf "%s/%s" (include "aggregator.tlsDir" $) .keyKey) }}
{{- end }}
{{- $_ := set $source "tls" $tls }}
{{- end }}
{{- end }}
{{- with .Values.auth.sasl }}
{{- if and .existingSecret .mountAsFile }}
{{- $sasl := $source.sasl | default dict }}
{{- $_ := set $sasl "password_file" (printf "%s/%s" (include "aggregator.saslDir" $) .passwordKey) }}
{{- $_ := set $source "sasl" $sasl }}
{{- end }}
{{- end }}
{{- with .Values.auth.oauth }}
{{- if or .existingSecret .serviceAccountToken.audience }}
{{- $sasl := $source.sasl | default dict }}
{{- $oauth := $sasl.oauth | default dict }}
{{- if .existingSecret }}
{{- $_ := set $oauth "client_secret_file" (printf "%s/%s" (include "aggregator.oauthDir" $) .clientSecretKey) }}
{{- end }}
{{- if .serviceAccountToken.audience }}
{{- $_ := set $oauth "token_file" (printf "%s/token" (include "aggregator.oauthTokenDir" $)) }}
{{- end }}
{{- $_ := set $sasl "oauth" $oauth }}
{{- $_ := set $source "sasl" $sasl }}
{{- end }}
{{- end }}
{{- with .Values.auth.schemaRegistry }}
{{- if .existingSecret }}
{{- $sr := $source.schema_registry | default dict }}
{{- $_ := set $sr "password_file" (printf "%s/%s" (include "aggregator.schemaRegistryDir" $) .passwordKey) }}
{{- $_ := set $source "schema_registry" $sr }}
{{- end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Seconds in a Go duration string ("25s", "1m30s", "500ms"), rounded up.
*/}}
{{- define "aggregator.durationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "μs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(ns|us|µs|μs|ms|s|m|h)" (toString .) -1 }}
{{- $number := regexFind "^[0-9.]+" . }}
{{- $unit := trimPrefix $number . }}
{{- $total = addf $total (mulf (float64 $number) (get $units $unit)) }}
{{- end }}
{{- ceil $total }}
{{- end }}

{{/*
Pod grace period: longer than config.shutdown_timeout (default 25s), so the
drain after SIGTERM ends before the kubelet's SIGKILL.
*/}}
{{- define "aggregator.terminationGracePeriodSeconds" -}}
{{- $shutdown := include "aggregator.durationSeconds" (.Values.config.shutdown_timeout | default "25s") | int }}
{{- if kindIs "string" .Values.terminationGracePeriodSeconds }}
{{- add $shutdown 15 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) $shutdown }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed config.shutdown_timeout (%s), or the drain is cut short by SIGKILL" (int .Values.terminationGracePeriodSeconds) (toString .Values.config.shutdown_timeout)) }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
"true" when the optional monitoring object named by .kind renders:
enabled is true, or "auto" and the cluster serves the CRD.
*/}}
{{- define "aggregator.monitoringEnabled" -}}
{{- $enabled := .enabled }}
{{- if eq (toString $enabled) "auto" }}
{{- .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) }}
{{- else }}
{{- toString $enabled }}
{{- end }}
{{- end }}

{{/*
PromQL label matchers for the release's own series.
*/}}
{{- define "aggregator.alertSelector" -}}
{{- .Values.prometheusRule.selector | default (printf "job=%q,namespace=%q" (include "aggregator.fullname" .) .Release.Namespace) }}
{{- end }}

{{/*
Range of the no-results alert: 15m, or 3 × (size + max_out_of_orderness +
allowed_lateness) when longer, so a healthy window always fires within it.
*/}}
{{- define "aggregator.noResultsRange" -}}
{{- with .Values.prometheusRule.alerts.noResults.range }}
{{- . }}
{{- else }}
{{- $w := .Values.config.window }}
{{- $size := include "aggregator.durationSeconds" ($w.size | default "0s") | int }}
{{- $lateness := include "aggregator.durationSeconds" ($w.allowed_lateness | default "0s") | int }}
{{- $ooo := include "aggregator.durationSeconds" (dig "max_out_of_orderness" "0s" (.Values.config.watermark | default dict)) | int }}
{{- printf "%ds" (max 900 (mul 3 (add $size $lateness $ooo))) }}
{{- end }}
{{- end }}

{{/*
Checks across values that the schema cannot express.
*/}}
{{- define "aggregator.validate" -}}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (not (kindIs "invalid" .minAvailable)) (not (kindIs "invalid" .maxUnavailable)) }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both (set the other to null)" }}
{{- end }}
{{- end }}
{{- $mechanism := dig "source" "sasl" "mechanism" "" .Values.config }}
{{- $password := has $mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512") }}
{{- if and $password (not .Values.auth.sasl.existingSecret) }}
{{- fail "config.source.sasl.mechanism is set: set auth.sasl.existingSecret to the Secret holding the password" }}
{{- end }}
{{- if and .Values.auth.sasl.existingSecret (not $password) }}
{{- fail "auth.sasl.existingSecret is set: set config.source.sasl.mechanism (PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512)" }}
{{- end }}
{{- $oauth := dig "source" "sasl" "oauth" dict .Values.config }}
{{- with .Values.auth.oauth }}
{{- if and (or .existingSecret .serviceAccountToken.audience) (ne $mechanism "OAUTHBEARER") }}
{{- fail "auth.oauth is set: set config.source.sasl.mechanism OAUTHBEARER" }}
{{- end }}
{{- if and .existingSecret (not (dig "token_endpoint" "" $oauth)) }}
{{- fail "auth.oauth.existingSecret holds a client secret: set config.source.sasl.oauth.token_endpoint and client_id" }}
{{- end }}
{{- if and .existingSecret .serviceAccountToken.audience }}
{{- fail "auth.oauth: set existingSecret (a token endpoint's client secret) or serviceAccountToken.audience (a token file), not both" }}
{{- end }}
{{- if and (eq $mechanism "OAUTHBEARER") (dig "token_endpoint" "" $oauth) (not .existingSecret) }}
{{- fail "config.source.sasl.oauth.token_endpoint is set: set auth.oauth.existingSecret to the Secret holding the client secret" }}
{{- end }}
{{- end }}
{{- if and .Values.auth.schemaRegistry.existingSecret (not (dig "source" "schema_registry" "url" "" .Values.config)) }}
{{- fail "auth.schemaRegistry.existingSecret is set: set config.source.schema_registry.url" }}
{{- end }}
{{- if ne (empty .Values.auth.tls.certKey) (empty .Values.auth.tls.keyKey) }}
{{- fail "auth.tls.certKey and auth.tls.keyKey go together (mutual TLS): set both or neither" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (not (or .Values.autoscaling.targetCPUUtilizationPercentage .Values.autoscaling.targetMemoryUtilizationPercentage)) }}
{{- fail "autoscaling.enabled needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" }}
{{- end }}
{{- end }}

{{/*
The aggregator container's environment, shared by the Deployment and the
validate hook Job: the instance id, the SASL Secret, GOMEMLIMIT's source,
extraEnv.
*/}}
{{- define "aggregator.env" -}}
{{- if .Values.staticMembership.enabled }}
- name: AGGREGATOR_SOURCE_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- with .Values.auth.sasl }}
{{- if and .existingSecret (not .mountAsFile) }}
- name: AGGREGATOR_SOURCE_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- end }}
{{- if and .existingSecret .usernameKey }}
- name: AGGREGATOR_SOURCE_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .usernameKey }}
{{- end }}
{{- end }}
{{- if .Values.rack.fromZoneLabel }}
# The pod's zone label: Kubernetes 1.35+ copies it from the node
# (PodTopologyLabels admission); "" without it, which is no rack.
- name: AGGREGATOR_SOURCE_RACK
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['topology.kubernetes.io/zone']
{{- end }}
{{- with .Values.auth.schemaRegistry }}
{{- if .existingSecret }}
- name: AGGREGATOR_SOURCE_SCHEMA_REGISTRY_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .usernameKey }}
{{- end }}
{{- end }}
# The service sets its Go memory limit to 90% of this (unless GOMEMLIMIT
# is set): window state lives in memory, and the garbage collector should
# work harder before the kernel's OOM killer ends the pod.
- name: CONTAINER_MEMORY_LIMIT
  valueFrom:
    resourceFieldRef:
      containerName: aggregator
      resource: limits.memory
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The aggregator container's volume mounts: the config, /tmp and the Secrets.
*/}}
{{- define "aggregator.volumeMounts" -}}
- name: config
  mountPath: /etc/aggregator/config.yaml
  subPath: config.yaml
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.auth.tls.existingSecret }}
- name: tls
  mountPath: {{ include "aggregator.tlsDir" . }}
  readOnly: true
{{- end }}
{{- if and .Values.auth.sasl.existingSecret .Values.auth.sasl.mountAsFile }}
- name: sasl
  mountPath: {{ include "aggregator.saslDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.auth.schemaRegistry.existingSecret }}
- name: schema-registry
  mountPath: {{ include "aggregator.schemaRegistryDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.auth.oauth.existingSecret }}
- name: oauth
  mountPath: {{ include "aggregator.oauthDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.auth.oauth.serviceAccountToken.audience }}
- name: oauth-token
  mountPath: {{ include "aggregator.oauthTokenDir" . }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod's volumes: (dict "root" $ "configMap" NAME), NAME being the
ConfigMap that holds config.yaml.
*/}}
{{- define "aggregator.volumes" -}}
- name: config
  configMap:
    name: {{ .configMap }}
{{- with .root }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- with .Values.auth.tls }}
{{- if .existingSecret }}
- name: tls
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      {{- range compact (list .caKey .certKey .keyKey) }}
      - {key: {{ . | quote }}, path: {{ . | quote }}}
      {{- end }}
{{- end }}
{{- end }}
{{- with .Values.auth.sasl }}
{{- if and .existingSecret .mountAsFile }}
- name: sasl
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - {key: {{ .passwordKey | quote }}, path: {{ .passwordKey | quote }}}
{{- end }}
{{- end }}
{{- with .Values.auth.oauth }}
{{- if .existingSecret }}
- name: oauth
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - {key: {{ .clientSecretKey | quote }}, path: {{ .clientSecretKey | quote }}}
{{- end }}
{{- with .serviceAccountToken }}
{{- if .audience }}
- name: oauth-token
  projected:
    defaultMode: 0440
    sources:
      - serviceAccountToken:
          audience: {{ .audience | quote }}
          expirationSeconds: {{ .expirationSeconds }}
          path: token
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.auth.schemaRegistry }}
{{- if .existingSecret }}
- name: schema-registry
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - {key: {{ .passwordKey | quote }}, path: {{ .passwordKey | quote }}}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
{{- end }}
