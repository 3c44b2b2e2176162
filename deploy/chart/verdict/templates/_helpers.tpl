{{/* The release's full name, used for every object of the chart. */}}
{{- define "verdict.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "verdict.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "verdict.labels" -}}
{{ include "verdict.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "verdict.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "verdict.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the serving certificate. */}}
{{- define "verdict.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "verdict.fullname" .)) -}}
{{- end -}}

{{/* The image: by digest when one is given, else by tag. */}}
{{- define "verdict.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The port the container listens on. */}}
{{- define "verdict.containerPort" -}}
{{- if .Values.tls.enabled }}8443{{ else }}8080{{ end -}}
{{- end -}}

{{/* A webhook's client and namespaces: (dict "root" . "caBundle" BUNDLE). */}}
{{- define "verdict.webhookClient" }}
    clientConfig:
      {{- if .root.Values.webhooks.url }}
      url: {{ .root.Values.webhooks.url | quote }}
      {{- else }}
      service:
        name: {{ include "verdict.fullname" .root }}
        namespace: {{ .root.Release.Namespace }}
        path: /v1/admission/review
        port: {{ .root.Values.service.port }}
      {{- end }}
      {{- if .caBundle }}
      caBundle: {{ .caBundle }}
      {{- end }}
    namespaceSelector:
      matchExpressions:
        {{- toYaml .root.Values.webhooks.namespaceSelector.matchExpressions | nindent 8 }}
        # verdict's own namespace is never sent to verdict.
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values: [{{ .root.Release.Namespace }}]
{{- end }}

{{/* A list of texts as a CEL list literal. */}}
{{- define "verdict.celList" -}}
[{{ range $i, $g := . }}{{ if $i }}, {{ end }}{{ $g | squote }}{{ end }}]
{{- end }}
