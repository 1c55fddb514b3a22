{{/* nats-server configuration; its hash restarts the servers when it changes. */}}
{{- define "s3csi.natsConfig" -}}
server_name: $POD_NAME
port: 4222
http_port: 8222
# Drain clients over 30s on SIGTERM rather than dropping them.
lame_duck_duration: 30s
lame_duck_grace_period: 10s
{{- if .Values.nats.tls.enabled }}
# Clients only over TLS; the services check the certificate against ca.crt.
tls {
  cert_file: /etc/nats-tls/tls.crt
  key_file: /etc/nats-tls/tls.key
  ca_file: /etc/nats-tls/ca.crt
  timeout: 5
}
{{- end }}
jetstream {
  store_dir: /data
  max_memory_store: {{ $.Values.nats.jetstream.maxMemory }}
  max_file_store: {{ $.Values.nats.jetstream.maxFile }}
}
{{- if gt (int .Values.nats.replicas) 1 }}
cluster {
  name: s3csi
  port: 6222
  {{- if .Values.nats.tls.enabled }}
  # Routes over mutual TLS: each server proves itself with the same certificate.
  tls {
    cert_file: /etc/nats-tls/tls.crt
    key_file: /etc/nats-tls/tls.key
    ca_file: /etc/nats-tls/ca.crt
    timeout: 5
  }
  {{- end }}
  routes: [
    {{- range $i := until (int .Values.nats.replicas) }}
    nats://s3csi-nats-{{ $i }}.s3csi-nats-headless.{{ $.Release.Namespace }}.svc:6222
    {{- end }}
  ]
}
{{- end }}
{{- if .Values.nats.auth.enabled }}
# One user per service, passwords from the environment (the Secret), permissions generated
# from the event catalog (shared/events) into files/nats-authorization.conf.
{{ .Files.Get "files/nats-authorization.conf" }}
{{- end }}
{{- end }}
