#!/usr/bin/env bash
# Long fuzz runs: every target in the Makefile's FUZZ_TARGETS for
# FUZZ_LONG_TIME (default 10m) each, in FUZZ_LANES lanes side by side
# (default 2), one fuzz worker per target (-parallel=1), so a lane holds one
# core. It prints one table row per target: package, target, wall seconds,
# executions, new interesting inputs, and the outcome. A failing target
# keeps its full output in $FUZZ_LONG_DIR/<pkg>-<target>.log and any crasher
# Go writes under testdata/fuzz/<target>/ in the package.
#
#   scripts/fuzz-long.sh ./decode/:FuzzDecode ./storage/:FuzzIndexTar ...
#   make fuzz-long                      # every target
#   make fuzz-long FUZZ_LONG_TIME=30m FUZZ_LANES=8
set -u
time=${FUZZ_LONG_TIME:-10m}
lanes=${FUZZ_LANES:-2}
dir=${FUZZ_LONG_DIR:-$(mktemp -d /tmp/longshore-fuzz.XXXXXX)}
go=${GO:-go}
mkdir -p "$dir"
[ $# -gt 0 ] || { echo "usage: $0 pkg:Target ..." >&2; exit 2; }

# Build every test binary once, before the clock of any target starts.
for t in "$@"; do echo "${t%%:*}"; done | sort -u | xargs "$go" test -count=1 -run='^$' >/dev/null || exit 1

one() { # pkg:Target -> one table row on stdout
	local pkg=${1%%:*} name=${1##*:} log start end rc last
	log="$dir/$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' '_')-$name.log"
	start=$(date +%s)
	"$go" test -run='^$' -fuzz="^$name\$" -fuzztime="$time" -parallel=1 "$pkg" >"$log" 2>&1
	rc=$?
	end=$(date +%s)
	last=$(grep -E 'fuzz: elapsed: .*execs: ' "$log" | tail -1)
	execs=$(echo "$last" | sed -nE 's/.*execs: ([0-9]+).*/\1/p')
	newi=$(echo "$last" | sed -nE 's/.*new interesting: ([0-9]+).*/\1/p')
	if [ $rc -eq 0 ]; then out=pass; else out="FAIL (see $log)"; fi
	printf '| %s | %s | %d | %s | %s | %s |\n' "$pkg" "$name" $((end - start)) "${execs:-?}" "${newi:-?}" "$out"
	return $rc
}

echo "# fuzz-long: $time a target, $lanes lanes, $(nproc) CPUs, $("$go" version | cut -d' ' -f3), started $(date -u +%FT%TZ), logs in $dir"
echo "| package | target | wall s | executions | new interesting | outcome |"
echo "|---|---|---|---|---|---|"
fail=0
i=0
pids=()
for t in "$@"; do
	lane=$((i % lanes))
	lanefile="$dir/lane$lane"
	echo "$t" >>"$lanefile"
	i=$((i + 1))
done
for lanefile in "$dir"/lane*; do
	(
		rc=0
		while read -r t; do one "$t" || rc=1; done <"$lanefile"
		exit $rc
	) &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
echo "# fuzz-long: ended $(date -u +%FT%TZ)"
exit $fail
