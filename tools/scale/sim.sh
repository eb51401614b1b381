#!/usr/bin/env bash
# The simulator at production scale (issue 48): K pipelines, copies of the examples traffic, traffic-camera, social
# and ocr-chain in turn, renamed NAME-i (as the joint benchmark's scaleInput in pkg/allocate builds them), on 20
# servers each, each with a diurnal day of DURATION from a tenth of to 1.5 times the demand it serves in hardware
# mode alone on 20 servers (found by bisection with `sleipnir plan`), the days started DURATION/K apart so that the
# peaks come one after another. It prints the command, then runs it under /usr/bin/time (CPU time and peak memory);
# the summaries' JSON lines go to standard output.
#
#   tools/scale/sim.sh                      # 10 pipelines, 200 servers, an hour
#   K=4 DURATION=20m tools/scale/sim.sh
#   DRY=1 tools/scale/sim.sh                # the copies and the command only
set -euo pipefail
bin=${SLEIPNIR:-bin/sleipnir}
k=${K:-10}
duration=${DURATION:-1h}
each=${SERVERS_EACH:-20}
seed=${SEED:-1}
policy=${POLICY:-loki}
# more sim flags; by default the live planner's limit on each solve (the simulator has none otherwise, and a joint solve
# of 10 pipelines runs to its node store's bound): planning then takes about what it takes live
flags=${FLAGS---solve-time-limit=1s}
out=${OUT:-$(mktemp -d)}
examples=(traffic traffic-camera social ocr-chain)
mkdir -p "$out"

# capacity EXAMPLE: the most demand (to 1 QPS) it serves in hardware mode on $each servers.
capacity() {
	local lo=1 hi=4096 mid
	while ((hi - lo > 1)); do
		mid=$(((lo + hi) / 2))
		if "$bin" plan --pipeline "examples/$1.yaml" --demand "$mid" --servers "$each" --json | grep -q '"mode":"hardware"'; then
			lo=$mid
		else
			hi=$mid
		fi
	done
	echo "$lo"
}

declare -A cap
args=()
for ((i = 0; i < k; i++)); do
	ex=${examples[i % ${#examples[@]}]}
	[ -n "${cap[$ex]:-}" ] || cap[$ex]=$(capacity "$ex")
	name="$ex-$i"
	sed "s/^name: $ex\$/name: $name/" "examples/$ex.yaml" >"$out/$name.yaml"
	grep -q "^name: $name\$" "$out/$name.yaml" || { echo "renaming $ex failed" >&2; exit 1; }
	lo=$((cap[$ex] / 10))
	hi=$((cap[$ex] * 3 / 2))
	# the day's shift: i/K of it, in seconds of the duration's
	shift=$(awk -v d="$duration" -v i="$i" -v k="$k" 'BEGIN {
		n = d + 0; u = substr(d, length(n "") + 1); m = (u == "h") ? 3600 : (u == "m") ? 60 : 1
		printf "%ds", n * m * i / k }')
	args+=(--pipeline "$out/$name.yaml" --workload "$name=diurnal:$lo:$hi:$duration:$shift")
done
cmd=("$bin" sim "${args[@]}" --servers $((k * each)) --seed "$seed" --policy "$policy" --json --progress=false $flags)
echo "# capacities on $each servers (hardware mode): $(for e in "${!cap[@]}"; do printf '%s=%s ' "$e" "${cap[$e]}"; done)" >&2
echo "# ${cmd[*]}" >&2
[ -n "${DRY:-}" ] && exit 0
/usr/bin/time -f '# cpu %U s user, %S s system, %e s wall, peak %M kB' "${cmd[@]}"
