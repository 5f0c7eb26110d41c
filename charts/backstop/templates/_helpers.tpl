{{/* Names and labels shared by every template. */}}
{{- define "backstop.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "backstop.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "backstop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "backstop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "backstop.labels" -}}
{{ include "backstop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "backstop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "backstop.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The registry (and namespace) every image of the chart is under: image.registry, required, no
default (a default would name a namespace the user does not own). The operator, task runtime
and Spark images are <registry>/operator, <registry>/runtime and <registry>/spark, each tagged
image.tag or the chart's appVersion.
*/}}
{{- define "backstop.registry" -}}
{{- $msg := "image.registry is required: the registry and namespace your nodes pull Backstop's images from (<registry>/operator, <registry>/runtime, <registry>/spark), e.g. --set image.registry=registry.example.com/team; for the images `make images` builds and loads into the local nodes: --set image.registry=backstop" -}}
{{- required $msg .Values.image.registry | trimSuffix "/" -}}
{{- end -}}

{{- define "backstop.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/* The operator's image: image.repository, or <registry>/operator. */}}
{{- define "backstop.image" -}}
{{- $repository := default (printf "%s/operator" (include "backstop.registry" .)) .Values.image.repository -}}
{{- printf "%s:%s" $repository (include "backstop.imageTag" .) -}}
{{- end -}}

{{/* The task runtime's image: the operator's default for a topology without spec.image. */}}
{{- define "backstop.taskImage" -}}
{{- printf "%s/runtime:%s" (include "backstop.registry" .) (include "backstop.imageTag" .) -}}
{{- end -}}

{{/* Whether the Spark driver runs on Spark's own Kubernetes scheduler (k8s:// master). */}}
{{- define "backstop.sparkOnK8s" -}}
{{- if and .Values.reoptimization.enabled (hasPrefix "k8s://" .Values.reoptimization.sparkMaster) -}}true{{- end -}}
{{- end -}}

{{/*
The namespace of the Spark executors with a k8s:// master (spark.kubernetes.namespace):
reoptimization.executorNamespace, required, and neither the release namespace nor a watched
one (the Job's ServiceAccount may create pods in it: there it could start a pod as any
ServiceAccount of the namespace, mounting any of its Secrets).
*/}}
{{- define "backstop.sparkExecutorNamespace" -}}
{{- $r := .Values.reoptimization -}}
{{- $ns := required "reoptimization.executorNamespace is required with a k8s:// sparkMaster: the namespace of the Spark executors, a namespace of their own (docs/reoptimization.md)" $r.executorNamespace -}}
{{- if eq $ns .Release.Namespace -}}
{{- fail "reoptimization.executorNamespace must not be the release namespace: the Job's ServiceAccount may create pods in it" -}}
{{- end -}}
{{- if has $ns .Values.watchNamespaces -}}
{{- fail "reoptimization.executorNamespace must not be a watched namespace (watchNamespaces): the Job's ServiceAccount may create pods in it" -}}
{{- end -}}
{{- range $key := list "spark.kubernetes.namespace" "spark.kubernetes.authenticate.executor.serviceAccountName" -}}
{{- if hasKey $r.sparkConf $key -}}
{{- fail (printf "reoptimization.sparkConf must not set %s: the chart sets it; set reoptimization.executorNamespace instead" $key) -}}
{{- end -}}
{{- end -}}
{{- $ns -}}
{{- end -}}

{{/* The Spark executors' ServiceAccount (k8s:// master), in the executor namespace. */}}
{{- define "backstop.sparkExecutorServiceAccountName" -}}
{{- printf "%s-spark-executor" (include "backstop.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ServiceAccount of the re-optimization Job's pod (mode: job). */}}
{{- define "backstop.sparkServiceAccountName" -}}
{{- default (printf "%s-reoptimize" (include "backstop.fullname" .)) .Values.reoptimization.driverServiceAccount.name -}}
{{- end -}}

{{/* The re-optimization Job's image: reoptimization.sparkImage, or <registry>/spark:<tag>. */}}
{{- define "backstop.sparkImage" -}}
{{- $derived := printf "%s/spark:%s" (include "backstop.registry" .) (include "backstop.imageTag" .) -}}
{{- default $derived .Values.reoptimization.sparkImage -}}
{{- end -}}

{{/* The metrics volume source (reoptimization.metricsVolume), mounted at /var/lib/backstop. */}}
{{- define "backstop.metricsVolume" -}}
{{- $m := .Values.reoptimization.metricsVolume -}}
{{- if $m.existingClaim -}}
persistentVolumeClaim:
  claimName: {{ $m.existingClaim }}
  readOnly: true
{{- else -}}
hostPath:
  path: {{ $m.hostPath }}
  type: Directory
{{- end -}}
{{- end -}}

{{/*
What the operator does in every namespace it watches (a Role there, or a ClusterRole when it
watches all namespaces). Kopf itself needs: list/watch (and patch, for its progress annotations
and finalizer under streams.backstop.dev) on the handled resource, patch on its status, create
on core/v1 events (kopf.info/warn; no log line is posted); the pods index needs list/watch.
*/}}
{{- define "backstop.namespacedRules" -}}
# StreamTopologies: kopf watches them and patches its annotations/finalizer; handlers patch status.
- apiGroups: ["streams.backstop.dev"]
  resources: ["streamtopologies"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["streams.backstop.dev"]
  resources: ["streamtopologies/status"]
  verbs: ["get", "patch"]
# Task pods carry an owner reference with blockOwnerDeletion: clusters that enforce
# OwnerReferencesPermissionEnforcement require update on the owner's finalizers.
- apiGroups: ["streams.backstop.dev"]
  resources: ["streamtopologies/finalizers"]
  verbs: ["update"]
# One RecoveryPlan per step of an incremental recovery.
- apiGroups: ["streams.backstop.dev"]
  resources: ["recoveryplans"]
  verbs: ["create", "get", "list", "patch", "delete"]
- apiGroups: ["streams.backstop.dev"]
  resources: ["recoveryplans/status"]
  verbs: ["get", "patch"]
# Task pods: created pinned to nodes, deleted (force-deleted on lost nodes), indexed by kopf;
# patch: a promoted replica's pod is relabelled primary (its role label and epoch annotation).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# One PodDisruptionBudget per topology: evictions (kubectl drain) wait for the operator's moves.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "create", "patch"]
# The recovery session ConfigMap that task pods mount, and the spec ConfigMap of the last
# good plan (what recovery follows while a later edit is rejected).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch", "update"]
# One Secret per topology: the token that guards its tasks' PUT /peers (read by the pods
# through secretKeyRef; the operator creates it and reads it back after a restart).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
# Events: Planned, NodeLost, RecoveryPlanIssued, ... (each once per 10 min per topology).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}

{{/*
The namespaces the operator watches, as a JSON list: the release namespace, then the listed
watchNamespaces (each once). Empty when watchAllNamespaces is true (every namespace).
*/}}
{{- define "backstop.watchedNamespaces" -}}
{{- if .Values.watchAllNamespaces -}}
[]
{{- else -}}
{{- prepend .Values.watchNamespaces .Release.Namespace | uniq | toJson -}}
{{- end -}}
{{- end -}}

{{/* The admission webhook's objects (templates/webhook.yaml). */}}
{{- define "backstop.webhookService" -}}
{{- printf "%s-webhook" (include "backstop.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "backstop.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "backstop.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Cluster-scoped, so the release namespace is part of it: one per installation. */}}
{{- define "backstop.webhookConfiguration" -}}
{{- printf "%s.%s.backstop.dev" (include "backstop.fullname" .) .Release.Namespace -}}
{{- end -}}
