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
Whether the migration hook brings its own copies of the ServiceAccount, ConfigMap and Secret ("true" or ""): a
pre-install hook runs before the release's own objects exist. With postgresql.bundled the migration runs after
install instead (the database starts with the release), so it uses the release's objects.
*/}}
{{- define "berth.migrate.ownResources" -}}
{{- if not .Values.postgresql.bundled }}true{{ end }}
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

{{/* What every Berth pod spec shares (scheduling, pull secrets). */}}
{{- define "berth.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
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
else a new random one. Called once per render (by the Secret), so the DSN and the server agree.
*/}}
{{- define "berth.postgresql.password" -}}
{{- if .Values.postgresql.auth.password }}
{{- .Values.postgresql.auth.password }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "berth.secretName" .) }}
{{- if and $existing $existing.data (hasKey $existing.data "postgres_password") }}
{{- index $existing.data "postgres_password" | b64dec }}
{{- else }}
{{- randAlphaNum 32 }}
{{- end }}
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
