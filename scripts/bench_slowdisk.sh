#!/usr/bin/env bash
# bench_slowdisk.sh: the packed path's spill on a slow local disk (issue
# 19). Spilled chunks are written once and their members read back with
# direct I/O, so the disk's bandwidth and IOPS bound the spilled path;
# this measures by how much, against the same disk unthrottled and
# against chunks held in memory.
#
#   sudo scripts/bench_slowdisk.sh [OUTDIR]     (default docs/bench)
#
# It makes an ext4 file system on a loop device (a file in the cache
# directory) mounted over /var/tmp for the run, and a cgroup v1 blkio
# group whose throttle applies to that device alone; longshore-bench runs
# inside the group with the nodes' TMPDIR on it (--node-tmpdir), so both
# of --pack-spill auto's directories ($TMPDIR, then /var/tmp) are on the
# slow disk as on a machine with one slow root disk: minio-packed shows
# what auto decides, probing the disk; local-packed-spill spills there
# whatever the disk (--spill-dir). MinIO's data (in /tmp) and everything
# else stay on the machine's own disk, unthrottled. One longshore-bench run a disk
# setting (SLOWDISK_LIMITS, "label:read/write bytes a second:IOPS", 0
# for none), each writing OUTDIR/bench-slowdisk-LABEL.json; all torn
# down at the end. Needs root, blkio throttling and a loop device.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/bench}
limits=${SLOWDISK_LIMITS:-"free:0:0 100MBps:104857600:2000 25MBps:26214400:500"}
img=${LONGSHORE_CACHE:-$HOME/.cache/longshore}/slowdisk.img
mnt=/var/tmp
cg=/sys/fs/cgroup/blkio/longshore-slowdisk
[ "$(id -u)" = 0 ] || { echo "bench_slowdisk: needs root (a loop device and a blkio cgroup)" >&2; exit 1; }
[ -d /sys/fs/cgroup/blkio ] || { echo "bench_slowdisk: no cgroup v1 blkio controller here" >&2; exit 1; }
dev= mounted=
cleanup() {
	[ -n "$mounted" ] && umount "$mnt"
	[ -n "$dev" ] && losetup -d "$dev" 2>/dev/null
	rm -f "$img"
	[ -d "$cg" ] && rmdir "$cg"
	return 0
}
trap cleanup EXIT
truncate -s 2G "$img"
mkfs.ext4 -q -F "$img"
dev=$(losetup -f --show "$img")
mountpoint -q "$mnt" && { echo "bench_slowdisk: $mnt is already a mount point" >&2; exit 1; }
mount "$dev" "$mnt"
mounted=1
chmod 1777 "$mnt"
mkdir -p "$mnt/spill" "$cg"
majmin=$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')
ds=$(scripts/dataset.sh "${BENCH_N:-2000}")
make -s build
for l in $limits; do
	IFS=: read -r label bps iops <<<"$l"
	for f in read_bps_device write_bps_device read_iops_device write_iops_device; do
		v=$bps
		[[ $f == *iops* ]] && v=$iops
		echo "$majmin $v" >"$cg/blkio.throttle.$f"
	done
	echo "bench_slowdisk: $label (spill disk $dev: $bps B/s, $iops IOPS each way)" >&2
	bash -c 'echo $$ >'"$cg"'/cgroup.procs; exec "$@"' _ \
		go run ./cmd/longshore-bench --node-tmpdir "$mnt/spill" --dataset "$ds" --epochs "${BENCH_EPOCHS:-3}" --reps "${BENCH_REPS:-3}" \
		--scrape-every 0 --spill-dir "$mnt/spill" --json "$out/bench-slowdisk-$label.json"
done
