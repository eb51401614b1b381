#!/usr/bin/env bash
# What the deployment's processes cost at rest and under a load (docs/measurements.md "A worker at rest"):
# `sleipnir cluster` (three clustered nats-server processes, the planner, two frontends and WORKERS workers, each a
# process of its own) serving examples/traffic.yaml and examples/ocr-chain.yaml. After SETTLE seconds it reads
# every process's CPU time (user and system, /proc/PID/stat) and voluntary context switches over WINDOW seconds,
# with no load; then again while loadgen sends traffic at TRAFFIC_QPS and ocr-chain at OCR_QPS (0: no loaded
# window). It prints one JSON object per window: per role (workers, nats-server, planner, frontend, loadgen) the
# CPU in milliseconds a second, summed over its processes, and for the workers each one's median, least and most
# CPU and context switches a second. Logs and state in OUT.
#
#   make build && tools/scale/rest.sh
#   SLEIPNIR=../other/bin/sleipnir tools/scale/rest.sh   # another build's services (nats-server: bin/nats-server)
set -euo pipefail
bin=${SLEIPNIR:-bin/sleipnir}
loadgen=${LOADGEN:-bin/loadgen}
natsd=${SLEIPNIR_NATS_SERVER:-$PWD/bin/nats-server}
workers=${WORKERS:-20}
settle=${SETTLE:-40}
window=${WINDOW:-20}
traffic_qps=${TRAFFIC_QPS:-40}
ocr_qps=${OCR_QPS:-20}
out=${OUT:-$(mktemp -d -t sleipnir-rest.XXXXXX)}
command -v jq >/dev/null || { echo "rest.sh needs jq (apt-get install jq)" >&2; exit 1; }
mkdir -p "$out"
echo "# files in $out" >&2

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	if [ -n "${cluster_pid:-}" ] && kill -0 "$cluster_pid" 2>/dev/null; then
		kill -INT "$cluster_pid"
		wait "$cluster_pid" 2>/dev/null || true
	fi
}
trap cleanup EXIT

SLEIPNIR_NATS_SERVER=$natsd "$bin" cluster --sleipnir "$(realpath "$bin")" --pipeline examples/traffic.yaml \
	--pipeline examples/ocr-chain.yaml --workers "$workers" --dir "$out/state" >"$out/cluster.out" 2>&1 &
cluster_pid=$!
sleep "$settle"
urls=$(grep -o 'nats://[^ ]*,[^ ]*' "$out/cluster.out" | head -1)
[ -n "$urls" ] || { echo "the cluster did not come up: $out/cluster.out" >&2; exit 1; }

# snapshot: one line per process of this cluster (its services are given its URLs) and of the loadgens: role, pid,
# CPU ticks, context switches.
rbin=$(realpath "$bin")
snapshot() {
	for p in /proc/[0-9]*; do
		local cmd role
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		case "$cmd" in
		*nats-server*" -c $out/state/"*) role=nats-server ;;
		"$rbin "*"$urls"*) role=${cmd#"$rbin "} role=${role%% *} ;; # worker, planner, frontend
		"$loadgen --nats $urls"*) role=loadgen ;;
		*) continue ;;
		esac
		local ticks switches
		ticks=$(awk '{print $14 + $15}' "$p/stat" 2>/dev/null) || continue
		switches=$(cat "$p"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}')
		echo "$role ${p#/proc/} $ticks $switches"
	done
}

# measure LABEL: a window's figures as JSON.
measure() {
	snapshot >"$out/$1.0"
	sleep "$window"
	snapshot >"$out/$1.1"
	join -j 2 <(sort -k2,2 "$out/$1.0") <(sort -k2,2 "$out/$1.1") |
		awk -v hz="$(getconf CLK_TCK)" -v w="$window" '{printf "%s %.2f %.1f\n", $2, ($6 - $3) * 1000 / hz / w, ($7 - $4) / w}' |
		jq -R -s --arg name "$1" '
			[split("\n")[] | select(length > 0) | split(" ") | {role: .[0], cpu: (.[1] | tonumber), switches: (.[2] | tonumber)}]
			| (map(select(.role == "worker")) | sort_by(.cpu)) as $w
			| {window: $name,
			   cpu_ms_per_s: (group_by(.role) | map({key: .[0].role, value: (map(.cpu) | add | . * 10 | round / 10)}) | from_entries),
			   worker_cpu_ms_per_s: {median: $w[($w | length) / 2 | floor].cpu, least: $w[0].cpu, most: $w[-1].cpu},
			   worker_switches_per_s: ($w | sort_by(.switches) | {median: .[(length) / 2 | floor].switches, least: .[0].switches, most: .[-1].switches})}'
}

measure rest
if ((traffic_qps > 0 || ocr_qps > 0)); then
	run=$((window + 30))
	"$loadgen" --nats "$urls" --pipeline traffic --qps "$traffic_qps" --duration "${run}s" --json >"$out/traffic.json" 2>"$out/traffic.log" &
	pids+=($!)
	"$loadgen" --nats "$urls" --pipeline ocr-chain --qps "$ocr_qps" --duration "${run}s" --json >"$out/ocr-chain.json" 2>"$out/ocr-chain.log" &
	pids+=($!)
	sleep 20
	measure load
	wait "${pids[@]}"
	pids=()
	for f in traffic ocr-chain; do tail -n 1 "$out/$f.json" | jq -c '{pipeline, sent, ok, slo_violation_ratio}'; done
fi
