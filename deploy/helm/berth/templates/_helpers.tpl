{{/* The chart's name, or nameOverride. */}}
{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: fullnameOverride, or <release>-<chart> unless the release name holds the chart's. */}}
{{- define "berth.fullname" -}}
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

{{/* The name of one component's objects: (dict "ctx" $ "component" "worker") -> <fullname>-worker. */}}
{{- define "berth.componentName" -}}
{{- printf "%s-%s" (include "berth.fullname" .ctx | trunc 50 | trimSuffix "-") .component }}
{{- end }}

{{- define "berth.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: (dict "ctx" $ "component" "api"); the component may be left out for shared objects. */}}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* Every object's labels: (dict "ctx" $ "component" "api"). */}}
{{- define "berth.labels" -}}
helm.sh/chart: {{ include "berth.chart" .ctx }}
{{ include "berth.selectorLabels" . }}
app.kubernetes.io/version: {{ include "berth.imageTag" .ctx | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: berth
{{- end }}

{{- define "berth.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "berth.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "berth.imageTag" .) }}
{{- end }}

{{- define "berth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "berth.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "berth.descriptorsConfigMapName" -}}
{{- default (include "berth.componentName" (dict "ctx" . "component" "descriptors")) .Values.descriptors.existingConfigMap }}
{{- end }}

{{- define "berth.secretName" -}}
{{- default (include "berth.componentName" (dict "ctx" . "component" "secrets")) .Values.secrets.existingSecret }}
{{- end }}

{{/*
The hook events of the migration Job and of the copies of the ServiceAccount, ConfigMap and Secret it uses: before
install and upgrade, or after install with postgresql.bundled (the database starts with the release). The Job always
uses hook copies: a pre-install hook runs before the release's own objects exist, and a pre-upgrade hook before they
are updated (the copies hold this release's descriptors and secrets, not the previous one's).
*/}}
{{- define "berth.migrate.hookEvents" -}}
{{- if .Values.postgresql.bundled }}post-install,pre-upgrade{{ else }}pre-install,pre-upgrade{{ end }}
{{- end }}

{{/* The pod security context every pod gets. */}}
{{- define "berth.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The container security context every container gets. */}}
{{- define "berth.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* Checksums of what the chart renders into the mounted ConfigMap and Secret: a change rolls the pods. */}}
{{- define "berth.checksumAnnotations" -}}
{{- if not .Values.descriptors.existingConfigMap }}
checksum/descriptors: {{ toJson .Values.descriptors.files | sha256sum }}
{{- end }}
{{- if not .Values.secrets.existingSecret }}
checksum/secrets: {{ toJson .Values.secrets.values | sha256sum }}
{{- end }}
{{- end }}

{{/* The metadata of a Berth pod template: (dict "ctx" $ "component" "api"). */}}
{{- define "berth.podMetadata" -}}
labels:
  {{- include "berth.labels" . | nindent 2 }}
  {{- with .ctx.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $annotations := include "berth.checksumAnnotations" .ctx }}
{{- with .ctx.Values.podAnnotations }}
{{- $annotations = printf "%s\n%s" $annotations (toYaml .) }}
{{- end }}
{{- with trim $annotations }}
annotations:
  {{- . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The environment of every Berth container. */}}
{{- define "berth.env" -}}
- name: BERTH_DESCRIPTORS
  value: /etc/berth/descriptors
- name: HOME
  value: /var/lib/berth
- name: BERTH_PLATFORM__EXEC__RUNS_ROOT
  value: /var/lib/berth/exec
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "berth.volumeMounts" -}}
- name: descriptors
  mountPath: /etc/berth/descriptors
  readOnly: true
- name: secrets
  mountPath: /run/secrets
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /var/lib/berth
{{- end }}

{{/* The volumes of every Berth pod: (dict "ctx" $ "configMap" <name> "secret" <name>). */}}
{{- define "berth.volumes" -}}
- name: descriptors
  configMap:
    name: {{ .configMap }}
- name: secrets
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
- name: tmp
  emptyDir:
    sizeLimit: {{ .ctx.Values.scratch.tmpSizeLimit }}
- name: home
  emptyDir:
    sizeLimit: {{ .ctx.Values.scratch.homeSizeLimit }}
{{- end }}

{{/* What every Berth pod spec shares: the image pull secrets. */}}
{{- define "berth.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Where one component's pods run: (dict "ctx" $ "component" "api"). nodeSelector, tolerations, affinity,
topologySpreadConstraints and priorityClassName of the component (api, worker, migrate) when set, else the global
ones. A spread constraint without a labelSelector gets the component's selector labels, so one global constraint
spreads each component's pods on its own.
*/}}
{{- define "berth.podPlacement" -}}
{{- $global := .ctx.Values }}
{{- $own := index .ctx.Values .component }}
{{- with $own.nodeSelector | default $global.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.tolerations | default $global.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $own.affinity | default $global.affinity }}
affinity:
  {{- tpl (toYaml .) $.ctx | nindent 2 }}
{{- end }}
{{- with $own.topologySpreadConstraints | default $global.topologySpreadConstraints }}
{{- $selector := include "berth.selectorLabels" (dict "ctx" $.ctx "component" $.component) | fromYaml }}
{{- $constraints := list }}
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- with $own.priorityClassName | default $global.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Containers added to a Berth pod: (dict "ctx" $ "containers" <list>). Values may hold templates (rendered with tpl);
a container without a securityContext gets the locked-down one every Berth container has.
*/}}
{{- define "berth.extraContainers" -}}
{{- $containers := list }}
{{- range .containers }}
{{- $container := deepCopy . }}
{{- if not (hasKey $container "securityContext") }}
{{- $_ := set $container "securityContext" (include "berth.containerSecurityContext" $.ctx | fromYaml) }}
{{- end }}
{{- $containers = append $containers $container }}
{{- end }}
{{- with $containers }}
{{- tpl (toYaml .) $.ctx }}
{{- end }}
{{- end }}

{{/* The init containers of one component's pods (global initContainers, then the component's). */}}
{{- define "berth.initContainers" -}}
{{- $own := index .ctx.Values .component }}
{{- $containers := concat (.ctx.Values.initContainers | default list) ($own.initContainers | default list) }}
{{- with $containers }}
initContainers:
  {{- include "berth.extraContainers" (dict "ctx" $.ctx "containers" .) | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The sidecars of the API or worker pods (global sidecars, then the component's), listed after the Berth container.
The migration Job has none: a sidecar that keeps running would keep the Job from completing (a native sidecar, an
init container with restartPolicy Always, can go in migrate.initContainers).
*/}}
{{- define "berth.sidecars" -}}
{{- $own := index .ctx.Values .component }}
{{- $containers := concat (.ctx.Values.sidecars | default list) ($own.sidecars | default list) }}
{{- with $containers }}
{{- include "berth.extraContainers" (dict "ctx" $.ctx "containers" .) }}
{{- end }}
{{- end }}

{{/* The extra volume mounts of one component's Berth container (global extraVolumeMounts, then the component's). */}}
{{- define "berth.extraVolumeMounts" -}}
{{- $own := index .ctx.Values .component }}
{{- with concat (.ctx.Values.extraVolumeMounts | default list) ($own.extraVolumeMounts | default list) }}
{{- tpl (toYaml .) $.ctx }}
{{- end }}
{{- end }}

{{/* The extra volumes of one component's pods (global extraVolumes, then the component's). */}}
{{- define "berth.extraVolumes" -}}
{{- $own := index .ctx.Values .component }}
{{- with concat (.ctx.Values.extraVolumes | default list) ($own.extraVolumes | default list) }}
{{- tpl (toYaml .) $.ctx }}
{{- end }}
{{- end }}

{{- define "berth.postgresql.host" -}}
{{- include "berth.componentName" (dict "ctx" . "component" "postgresql") }}
{{- end }}

{{- define "berth.redis.host" -}}
{{- include "berth.componentName" (dict "ctx" . "component" "redis") }}
{{- end }}

{{/*
The bundled PostgreSQL's password: postgresql.auth.password, else the one an earlier install stored in the Secret,
else a new random one. The release's Secret and the migration hook's copy both call it: a generated password is
kept for the rest of the render (in a dict of the chart's own, .Values.__berthRender), so both hold the same.
*/}}
{{- define "berth.postgresql.password" -}}
{{- if .Values.postgresql.auth.password }}
{{- .Values.postgresql.auth.password }}
{{- else }}
{{- if not (hasKey .Values "__berthRender") }}
{{- $_ := set .Values "__berthRender" dict }}
{{- end }}
{{- $render := index .Values "__berthRender" }}
{{- if not (hasKey $render "postgresPassword") }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "berth.secretName" .) }}
{{- if and $existing $existing.data (hasKey $existing.data "postgres_password") }}
{{- $_ := set $render "postgresPassword" (index $existing.data "postgres_password" | b64dec) }}
{{- else }}
{{- $_ := set $render "postgresPassword" (randAlphaNum 32) }}
{{- end }}
{{- end }}
{{- index $render "postgresPassword" }}
{{- end }}
{{- end }}

{{/* The data of the Secret the chart creates: secrets.values, plus the bundled services' DSN and URL. */}}
{{- define "berth.secretData" -}}
{{- $data := dict }}
{{- range $key, $value := .Values.secrets.values }}
{{- $_ := set $data $key (toString $value) }}
{{- end }}
{{- if .Values.redis.bundled }}
{{- $_ := set $data "redis_url" (printf "redis://%s:6379/0" (include "berth.redis.host" .)) }}
{{- end }}
{{- if .Values.postgresql.bundled }}
{{- $password := include "berth.postgresql.password" . }}
{{- $auth := .Values.postgresql.auth }}
{{- $_ := set $data "postgres_password" $password }}
{{- $_ := set $data "pg_dsn" (printf "postgresql://%s:%s@%s:5432/%s" (urlquery $auth.username) (urlquery $password) (include "berth.postgresql.host" .) $auth.database) }}
{{- end }}
{{- range $key, $value := $data }}
{{ $key }}: {{ $value | b64enc | quote }}
{{- end }}
{{- end }}

{{/*
A PodDisruptionBudget of one component: (dict "ctx" $ "component" "worker"), from <component>.podDisruptionBudget:
maxUnavailable when set, else minAvailable (Kubernetes takes one of them, so setting both is refused).
*/}}
{{- define "berth.podDisruptionBudget" -}}
{{- $budget := (index .ctx.Values .component).podDisruptionBudget }}
{{- $maxUnavailable := $budget.maxUnavailable | toString }}
{{- $minAvailable := $budget.minAvailable | toString }}
{{- if and (ne $maxUnavailable "") (ne $maxUnavailable "<nil>") (ne $minAvailable "") (ne $minAvailable "<nil>") }}
{{- fail (printf "%s.podDisruptionBudget: set minAvailable or maxUnavailable, not both (set the other to \"\")" .component) }}
{{- end }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "berth.componentName" (dict "ctx" .ctx "component" .component) }}
  labels:
    {{- include "berth.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
spec:
  {{- if and (ne $maxUnavailable "") (ne $maxUnavailable "<nil>") }}
  maxUnavailable: {{ $budget.maxUnavailable }}
  {{- else }}
  minAvailable: {{ required (printf "%s.podDisruptionBudget: set minAvailable or maxUnavailable" .component) $budget.minAvailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "berth.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end }}

{{/*
The Resource metrics of an autoscaling block (api.autoscaling, worker.autoscaling): the CPU and memory utilization
targets, each left out when empty.
*/}}
{{- define "berth.resourceMetrics" -}}
{{- with .targetCPUUtilizationPercentage }}
- type: Resource
  resource:
    name: cpu
    target:
      type: Utilization
      averageUtilization: {{ . }}
{{- end }}
{{- with .targetMemoryUtilizationPercentage }}
- type: Resource
  resource:
    name: memory
    target:
      type: Utilization
      averageUtilization: {{ . }}
{{- end }}
{{- end }}

{{/*
The Secret key holding the admin API key that Prometheus and KEDA send to /metrics, as (dict "name" … "key" …), or
an empty dict when metrics.apiKeySecret.key is empty (platform.metrics.access: open).
*/}}
{{- define "berth.metricsApiKeyRef" -}}
{{- with .Values.metrics.apiKeySecret.key }}
name: {{ $.Values.metrics.apiKeySecret.name | default (include "berth.secretName" $) }}
key: {{ . }}
{{- end }}
{{- end }}
