#!/usr/bin/env bash
# k8s-check.sh: deploy/k8s/overlays/example on a real Kubernetes control
# plane started here (`make k8s-check`): kube-apiserver over kine
# (SQLite), kube-controller-manager, kube-scheduler, and kwok simulating
# two GPU nodes (nvidia.com/gpu: 8 each, tainted) and a CPU node (no
# kubelet: no container runs).
# Binaries: scripts/k8s-build.sh (built once from the module proxy, cached).
#
# 1. the user's Secrets, as deploy/k8s/README.md says to make them;
# 2. the rendered overlay applied with server-side validation (strict
#    fields) and warnings as errors, as a dry run, then for real;
# 3. the controllers and the scheduler act on it: the coordinator Job's
#    pod and the trainers' two pods admitted under Pod Security
#    restricted, scheduled (the trainers on two different GPU nodes) and
#    running as kwok reports them.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/k8s-build.sh)
PATH=$bin:$PATH
work=$(mktemp -d /tmp/longshore-k8s.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ ${ok:-} == 1 ]]; then rm -rf "$work"; else echo "k8s-check: logs in $work" >&2; fi
}
trap cleanup EXIT
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
	done
}
# wait_for WHAT SECONDS CMD...: until CMD succeeds (a backstop that only
# ends a failed start).
wait_for() {
	local what=$1 n=$2 i p
	shift 2
	for ((i = 0; i < n * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "k8s-check: a daemon exited waiting for $what" >&2; n=0; break 2; }; done
		sleep 0.2
	done
	echo "k8s-check: $what did not come up in ${n}s" >&2
	tail -n 30 "$work"/*.log >&2
	return 1
}
t0=$SECONDS

etcd_port=$(free_port)
kine --endpoint "sqlite://$work/kine.db?_journal=WAL&cache=shared" --listen-address "127.0.0.1:$etcd_port" --metrics-bind-address 0 >"$work/kine.log" 2>&1 &
pids+=($!)
wait_for kine 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/$etcd_port"

openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
openssl rsa -in "$work/sa.key" -pubout -out "$work/sa.pub" 2>/dev/null
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$token,admin,admin,system:masters" >"$work/tokens.csv"
api_port=$(free_port)
kube-apiserver --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
	--secure-port="$api_port" --cert-dir="$work/pki" --token-auth-file="$work/tokens.csv" \
	--authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/16 \
	--service-account-key-file="$work/sa.pub" --service-account-signing-key-file="$work/sa.key" \
	--service-account-issuer=https://kubernetes.default.svc --endpoint-reconciler-type=none >"$work/apiserver.log" 2>&1 &
pids+=($!)
kc=$work/kubeconfig
cat >"$kc" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$api_port", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$token"}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC
export KUBECONFIG=$kc
wait_for kube-apiserver 180 kubectl get --raw /readyz
echo "k8s-check: kube-apiserver $(kube-apiserver --version | awk '{print $2}') ready over kine in $((SECONDS - t0))s" >&2

kube-controller-manager --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
	--bind-address=127.0.0.1 --secure-port="$(free_port)" --leader-elect=false \
	--service-account-private-key-file="$work/sa.key" --root-ca-file="$work/pki/apiserver.crt" \
	--controllers='*' >"$work/controller-manager.log" 2>&1 &
pids+=($!)
kube-scheduler --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
	--bind-address=127.0.0.1 --secure-port="$(free_port)" --leader-elect=false >"$work/scheduler.log" 2>&1 &
pids+=($!)
# kwok's own "fast" stages (nodes ready at once, pods running at once),
# from its module.
kwok_mod=$(GOFLAGS= go list -m -f '{{.Dir}}' "sigs.k8s.io/kwok@$(scripts/k8s-build.sh --kwok-version)")
kubectl kustomize "$kwok_mod/kustomize/stage/fast" >"$work/kwok-stages.yaml"
kwok --config="$work/kwok-stages.yaml" --kubeconfig="$kc" --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
	--cidr=10.0.0.0/24 --node-ip=127.0.0.1 >"$work/kwok.log" 2>&1 &
pids+=($!)

# Two GPU hosts, as the NVIDIA device plugin reports them (tainted), and
# a CPU host for the coordinator.
fake_node() { # NAME TAINTS GPUS
	kubectl apply --server-side -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: $1, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
spec:
  taints: $2
status:
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$3"}
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$3"}
NODE
}
fake_node gpu-0 '[{key: nvidia.com/gpu, effect: NoSchedule}]' 8
fake_node gpu-1 '[{key: nvidia.com/gpu, effect: NoSchedule}]' 8
fake_node cpu-0 '[]' 0
wait_for "kwok's nodes" 120 bash -c "[[ \$(kubectl get nodes -o jsonpath='{.items[*].status.conditions[?(@.type==\"Ready\")].status}') == 'True True True' ]]"

# The user's part (deploy/k8s/README.md): the namespace, two Secrets.
ns=longshore
kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" create secret generic longshore-s3 --from-literal=AWS_ACCESS_KEY_ID=check \
	--from-literal=AWS_SECRET_ACCESS_KEY=check >/dev/null
go build -o "$work/longshore-certs" ./cmd/longshore-certs
"$work/longshore-certs" ca --out "$work/ca" >/dev/null
"$work/longshore-certs" gossip-key --out "$work/gossip.key" >/dev/null
head -c 32 /dev/urandom | base64 >"$work/metrics.token"
kubectl -n "$ns" create secret generic longshore-keys --from-file="$work/ca/ca.crt" --from-file="$work/ca/ca.key" \
	--from-file="$work/gossip.key" --from-file="$work/metrics.token" >/dev/null
s3=$(kubectl -n "$ns" get secret longshore-s3 -o jsonpath='{.data.AWS_ACCESS_KEY_ID}')

kubectl kustomize deploy/k8s/overlays/example >"$work/rendered.yaml"
kubectl --warnings-as-errors apply --server-side --field-manager=longshore --validate=strict --dry-run=server \
	-f "$work/rendered.yaml"
kubectl --warnings-as-errors apply --server-side --field-manager=longshore --validate=strict -f "$work/rendered.yaml"
[[ $(kubectl -n "$ns" get secret longshore-s3 -o jsonpath='{.data.AWS_ACCESS_KEY_ID}') == "$s3" ]] ||
	{ echo "k8s-check: applying the manifests changed the user's longshore-s3 Secret" >&2; exit 1; }

# Admitted (Pod Security restricted), scheduled, run: three pods.
# kwok's fast stages run a Job's pod and complete it at once
# (Succeeded): either phase counts.
running() {
	local out
	out=$(kubectl -n "$ns" get pods -o jsonpath='{range .items[*]}{.metadata.labels.app\.kubernetes\.io/name} {.spec.nodeName} {.status.phase}{"\n"}{end}')
	[[ $(grep -cE ' (Running|Succeeded)$' <<<"$out") == 3 ]] || return 1
	[[ $(grep '^longshore-trainer ' <<<"$out" | awk '{print $2}' | sort -u | wc -l) == 2 ]]
}
if ! wait_for "the job's pods" 180 running; then
	kubectl -n "$ns" get jobs,pods -o wide >&2
	kubectl -n "$ns" get events >&2
	exit 1
fi
kubectl -n "$ns" get pods -o wide >&2
echo "k8s-check: applied (server-side, strict, no warnings); 3 pods admitted under Pod Security restricted, scheduled and run (kwok), the trainers on 2 hosts; $((SECONDS - t0))s" >&2
ok=1
