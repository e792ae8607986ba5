// Package s3 is the storage.Store on S3 or MinIO, through minio-go v7.
// Packages that need only the seam import storage, which links no
// object store client; storage/stores opens this one for s3:// URLs.
//
// DefaultOptions reads the environment: AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL (http:// or https:// decides TLS), AWS_REGION or
// AWS_DEFAULT_REGION, and credentials from AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else MINIO_ROOT_USER /
// MINIO_ROOT_PASSWORD, else MINIO_ACCESS_KEY / MINIO_SECRET_KEY, else the
// rest of the AWS CLI's chain (credentials.go: a profile, web identity,
// container credentials, instance metadata), whose keys are refreshed
// before they expire. New probes the bucket so a wrong bucket, endpoint or key fails at start. The
// store retries 5xx, throttling, timeouts, connection failures and bad
// answers (short bodies, bodies whose MD5 is not the ETag, the wrong
// range) itself with full-jitter exponential backoff, honouring
// Retry-After, under a per-store request budget that throttling lowers
// (AIMD); it counts requests, retries by cause, throttled responses, the
// time backed off, errors and bytes in Stats. storage/faultproxy is the
// proxy its tests misbehave through.
package s3
