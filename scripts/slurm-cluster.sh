#!/usr/bin/env bash
# slurm-cluster.sh: a Slurm cluster on this one machine, for `make
# slurm-check` (Debian's slurm-wlm 22.05 and munge: scripts/deps.sh slurm).
# No systemd and nothing under /etc: munged, slurmctld and one slurmd
# per simulated node run from DIR with a generated slurm.conf.
#
#   scripts/slurm-cluster.sh start DIR [NODES]   start; prints the line to source (SLURM_CONF=...)
#   scripts/slurm-cluster.sh stop DIR            stop what start started (by the pids it wrote)
#
# Node n<i> has NodeAddr 127.0.0.<i+1> (every 127/8 address is this
# machine's loopback), so each node's daemons bind their own address and
# the job's ports do not collide; each has 8 GPUs by gres, without device
# files (links to /dev/null stand in for them: nothing is bound).
set -euo pipefail
cmd=${1:?usage: slurm-cluster.sh start|stop DIR [NODES]}
dir=${2:?usage: slurm-cluster.sh start|stop DIR [NODES]}
nodes=${3:-2}

stop() {
	local f pid
	# Jobs first: slurmstepd outlives its slurmd.
	if [[ -f $dir/pids/slurmctld ]]; then
		SLURM_CONF=$dir/slurm.conf scancel --user="$(id -un)" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			[[ -z $(SLURM_CONF=$dir/slurm.conf squeue -h 2>/dev/null) ]] && break
			sleep 0.2
		done
	fi
	for f in "$dir"/pids/*; do
		[[ -f $f ]] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
	done
	for f in "$dir"/pids/*; do
		[[ -f $f ]] || continue
		pid=$(cat "$f")
		for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		rm -f "$f"
	done
}

# free_port: a TCP port nothing listens on.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
	done
}

case $cmd in
stop) stop; exit 0 ;;
start) ;;
*) echo "usage: slurm-cluster.sh start|stop DIR [NODES]" >&2; exit 2 ;;
esac

for t in munged slurmctld slurmd sbatch scontrol; do
	command -v $t >/dev/null || { echo "slurm-cluster: no $t: run scripts/deps.sh slurm" >&2; exit 1; }
done
mkdir -p "$dir"/{munge,state,spool,log,pids}
chmod 700 "$dir/munge"
user=$(id -un)
# --force: the key and socket live under a temporary directory that
# munged would otherwise refuse as not secure enough.
head -c 1024 /dev/urandom >"$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
	--pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
for ((i = 0; i < 100; i++)); do [[ -s $dir/munge/munged.pid ]] && break; sleep 0.1; done
cp "$dir/munge/munged.pid" "$dir/pids/munged"

ctld_port=$(free_port)
cpus=$(nproc)
{
	echo "ClusterName=longshore"
	echo "SlurmctldHost=localhost(127.0.0.1)"
	echo "SlurmctldPort=$ctld_port"
	echo "AuthType=auth/munge"
	echo "CredType=cred/munge"
	echo "AuthInfo=socket=$dir/munge/munge.socket"
	echo "SlurmUser=$user"
	echo "SlurmdUser=$user"
	echo "StateSaveLocation=$dir/state"
	echo "SlurmdSpoolDir=$dir/spool/%n"
	echo "SlurmctldPidFile=$dir/slurmctld.pid"
	echo "SlurmdPidFile=$dir/slurmd-%n.pid"
	echo "SlurmctldLogFile=$dir/log/slurmctld.log"
	echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
	echo "ProctrackType=proctrack/linuxproc"
	echo "TaskPlugin=task/none"
	echo "JobAcctGatherType=jobacct_gather/none"
	echo "AccountingStorageType=accounting_storage/none"
	echo "SelectType=select/cons_tres"
	echo "SelectTypeParameters=CR_Core"
	echo "SlurmdParameters=config_overrides"
	echo "GresTypes=gpu"
	echo "MpiDefault=none"
	echo "ReturnToService=2"
	echo "SlurmdTimeout=30"
	echo "InactiveLimit=0"
	echo "KillWait=5"
	echo "SlurmdDebug=${SLURM_DEBUG:-info}"
	[[ -z ${SLURM_DEBUG_FLAGS:-} ]] || echo "DebugFlags=$SLURM_DEBUG_FLAGS"
	for ((i = 1; i <= nodes; i++)); do
		echo "NodeName=n$i NodeHostname=$(hostname) NodeAddr=127.0.0.$((i + 1)) Port=$(free_port) CPUs=$((cpus > 16 ? cpus : 16)) RealMemory=1000 Gres=gpu:8 State=UNKNOWN"
	done
	echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$dir/slurm.conf"
# gres/gpu drops GPUs without device files, and wants character
# devices: eight links to /dev/null stand in for /dev/nvidia0-7
# (task/none: nothing is constrained to them).
mkdir -p "$dir/dev"
for g in 0 1 2 3 4 5 6 7; do ln -sf /dev/null "$dir/dev/gpu$g"; done
echo "NodeName=n[1-$nodes] Name=gpu File=$dir/dev/gpu[0-7]" >"$dir/gres.conf"
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -i -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
echo $! >"$dir/pids/slurmctld"
for ((i = 1; i <= nodes; i++)); do
	mkdir -p "$dir/spool/n$i"
	slurmd -D -N "n$i" -f "$SLURM_CONF" >"$dir/log/slurmd-n$i.out" 2>&1 &
	echo $! >"$dir/pids/slurmd-n$i"
done
# Up when every node is idle (a generous backstop ends a failed start).
for ((i = 0; i < 300; i++)); do
	st=$(sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)
	[[ $st == "idle " ]] && break
	[[ $st == *inval* || $st == *drain* ]] && break
	dead=
	for f in "$dir"/pids/slurm*; do kill -0 "$(cat "$f")" 2>/dev/null || dead+=" $(basename "$f")"; done
	[[ -z $dead ]] || { st="exited:$dead"; break; }
	sleep 0.2
done
if [[ $st != "idle " ]]; then
	echo "slurm-cluster: the nodes did not come up (states: ${st:-none}); logs in $dir/log" >&2
	tail -n 20 "$dir"/log/* >&2 || true
	stop
	exit 1
fi
echo "export SLURM_CONF=$SLURM_CONF"
