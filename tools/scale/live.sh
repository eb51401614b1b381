#!/usr/bin/env bash
# The live planner at scale (issue 48): `sleipnir up` with WORKERS emulated workers and K pipelines, copies of the
# examples traffic, traffic-camera, social and ocr-chain in turn, renamed NAME-i (as tools/scale/sim.sh builds
# them), each under a steady QPS from a loadgen of its own; after SETTLE seconds of that, STEPS pipelines spread over
# the K (i*K/STEPS: with the defaults traffic-0, ocr-chain-3 and social-6) in turn, GAP seconds apart, get STEP_QPS
# more from a second loadgen until the end. Then it reads the planner's
# log (JSON lines) and metrics, and prints one JSON object per line:
#   - "step": per step, the time from the step's loadgen starting to the first plan published for its pipeline after
#     it (an upper bound: the loadgen's start-up is counted), with that plan's trigger and estimate;
#   - "heartbeats": the heartbeats the planner handled from the loads' start to their end, against one a second
#     from every worker, and their delay from the KV bucket to handled (sleipnir_planner_heartbeat_delay_seconds);
#   - "assignments": every change of a worker's assignment (pipeline and variant, or idle) once the system is up,
#     each explained by a plan published for its old or new pipeline since the worker's previous assignment, else
#     by a tuner loan since then, else by neither; with the new plans by trigger and the workers found gone;
#   - "run": the load average and the CPU the up process took over the loads, and the loadgens' summaries.
# Everything runs under nice 19 on its own ports (NATS_PORT, METRICS_PORT; the frontend's HTTP is off), with its
# copies, state and logs in OUT. Needs jq and curl.
#
#   tools/scale/live.sh                      # 200 workers, 10 pipelines at 20 QPS, 3 steps of +40 QPS: 4 minutes
#   WORKERS=40 K=2 STEPS=1 tools/scale/live.sh
#   FLAGS='--storage memory' tools/scale/live.sh   # more flags of `sleipnir up`
set -euo pipefail
bin=${SLEIPNIR:-bin/sleipnir}
loadgen=${LOADGEN:-bin/loadgen}
k=${K:-10}
workers=${WORKERS:-200}
qps=${QPS:-20}
step_qps=${STEP_QPS:-40}
steps=${STEPS:-3}
settle=${SETTLE:-60}
gap=${GAP:-30}
tail=${TAIL:-30}
port=${NATS_PORT:-24722}
mport=${METRICS_PORT:-24723}
flags=${FLAGS:-}
out=${OUT:-$(mktemp -d -t sleipnir-live.XXXXXX)}
examples=(traffic traffic-camera social ocr-chain)
for tool in jq curl; do
	command -v $tool >/dev/null || { echo "live.sh needs $tool (apt-get install $tool)" >&2; exit 1; }
done
((steps <= k)) || { echo "STEPS=$steps: at most K=$k" >&2; exit 1; }
mkdir -p "$out"
echo "# files in $out" >&2

names=()
args=()
for ((i = 0; i < k; i++)); do
	ex=${examples[i % ${#examples[@]}]}
	name="$ex-$i"
	sed "s/^name: $ex\$/name: $name/" "examples/$ex.yaml" >"$out/$name.yaml"
	grep -q "^name: $name\$" "$out/$name.yaml" || { echo "renaming $ex failed" >&2; exit 1; }
	names+=("$name")
	args+=(--pipeline "$out/$name.yaml")
done

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	if [ -n "${up_pid:-}" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -INT "$up_pid"
		wait "$up_pid" 2>/dev/null || true
	fi
}
trap cleanup EXIT

now() { date +%s.%N; }
cputime() { awk '{print $14 + $15}' "/proc/$up_pid/stat"; } # clock ticks, user + system
scrape() { curl -sf "http://127.0.0.1:$mport/metrics" >"$1" || : >"$1"; }

# TZ=UTC: the log's times are read as UTC below.
cmd=("$bin" up "${args[@]}" --workers "$workers" --nats-port "$port" --http= --metrics-addr "127.0.0.1:$mport"
	--state-dir "$out/state" --log-json $flags)
echo "# TZ=UTC nice -n 19 ${cmd[*]}" >&2
started=$(now)
TZ=UTC nice -n 19 "${cmd[@]}" 2>"$out/up.log" &
up_pid=$!
until grep -q '"msg":"sleipnir is up"' "$out/up.log"; do
	kill -0 "$up_pid" 2>/dev/null || { echo "sleipnir up exited; see $out/up.log" >&2; exit 1; }
	sleep 0.5
done
up_at=$(now)

total=$((settle + steps * gap + tail))
stepped=()
for ((i = 0; i < steps; i++)); do stepped+=("${names[i * k / steps]}"); done
echo "# loads: ${names[*]} at $qps QPS for ${total}s; steps of +$step_qps QPS on ${stepped[*]}" >&2
load_at=$(now)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
cpu0=$(cputime)
scrape "$out/metrics-start.txt"
for name in "${names[@]}"; do
	nice -n 19 "$loadgen" --nats "nats://127.0.0.1:$port" --pipeline "$name" --qps "$qps" --duration "${total}s" \
		--json >"$out/load-$name.out" 2>"$out/load-$name.err" &
	pids+=($!)
done
: >"$out/steps.jsonl"
for ((i = 0; i < steps; i++)); do
	due=$(awk -v a="$load_at" -v s=$((settle + i * gap)) 'BEGIN {printf "%.3f", a + s}')
	sleep "$(awk -v d="$due" -v n="$(now)" 'BEGIN {printf "%.3f", (d > n) ? d - n : 0}')"
	name=${stepped[i]}
	at=$(now)
	nice -n 19 "$loadgen" --nats "nats://127.0.0.1:$port" --pipeline "$name" --qps "$step_qps" --seed $((i + 2)) \
		--duration "$((total - settle - i * gap))s" --json >"$out/step-$name.out" 2>"$out/step-$name.err" &
	pids+=($!)
	echo "{\"pipeline\":\"$name\",\"at\":$at}" >>"$out/steps.jsonl"
done
for pid in "${pids[@]}"; do wait "$pid" || echo "# a loadgen failed: see $out/*.err" >&2; done
pids=()
end_at=$(now)
scrape "$out/metrics-end.txt"
cpu1=$(cputime)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
cleanup
trap - EXIT

# The log's time as Unix seconds (UTC, nanoseconds kept).
ts='def ts: .time | capture("^(?<s>[^.Z+]+)(?<f>\\.[0-9]+)?") | (.s + "Z" | fromdateiso8601) + ((.f // ".0") | "0" + . | tonumber);'
jq -nc -R --arg from "$qps" --arg add "$step_qps" --slurpfile steps "$out/steps.jsonl" "$ts"'
	[inputs | fromjson? // empty | select(.msg == "plan published") | {pipeline, t: ts, epoch, trigger, estimate_qps}]
	as $plans | $steps[] as $s
	| ([$plans[] | select(.pipeline == $s.pipeline and .t > $s.at)] | first) as $p
	| {step: $s.pipeline, qps: "\($from) -> \(($from | tonumber) + ($add | tonumber))",
	   plan_after_s: (if $p then (($p.t - $s.at) * 1000 | round) / 1000 else null end),
	   trigger: $p.trigger, epoch: $p.epoch, estimate_qps: $p.estimate_qps}' <"$out/up.log"

# The heartbeat delay histogram's growth over the loads: le -> count, and the sum and count.
hist() { grep '^sleipnir_planner_heartbeat_delay_seconds' "$1" | sed -E 's/.*le="([^"]+)"\} /\1 /; s/^sleipnir_planner_heartbeat_delay_seconds_(sum|count) /\1 /'; }
awk -v span="$(awk -v a="$load_at" -v b="$end_at" 'BEGIN {print b - a}')" -v workers="$workers" '
	FILENAME == ARGV[1] { before[$1] = $2; next }
	{ d[$1] = $2 - before[$1] }
	END {
		n = d["count"]
		printf "{\"heartbeats\":%d,\"span_s\":%.1f,\"per_s\":%.1f,\"expected_per_s\":%d,\"mean_delay_ms\":%.2f", n, span, n / span, workers, (n > 0) ? 1000 * d["sum"] / n : 0
		split("0.01 0.1 0.5 1 5", les, " ")
		for (i = 1; i <= 5; i++) printf ",\"within_%ss\":%.5f", les[i], (n > 0) ? d[les[i]] / n : 0
		printf ",\"over_5s\":%d}\n", n - d["5"]
	}' <(hist "$out/metrics-start.txt") <(hist "$out/metrics-end.txt")

jq -nc -R --argjson from "$up_at" "$ts"'
	reduce (inputs | fromjson? // empty | select(.service == "planner") | . + {t: ts}) as $r (
		{last: {}, plans: {}, loan: -1, moves: 0, with_plan: 0, with_loan: 0, unexplained: [], triggers: {},
		 loans: 0, gone: 0};
		if $r.msg == "plan published" then
			.plans[$r.pipeline] = $r.t
			| if $r.t >= $from then .triggers[$r.trigger // "begin"] += 1 else . end
		elif $r.msg == "tuner loans" then .loan = $r.t | if $r.t >= $from then .loans += 1 else . end
		elif ($r.msg | IN("worker assigned", "worker idle", "worker gone")) then
			(if $r.msg == "worker assigned" then "\($r.pipeline):\($r.variant)" elif $r.msg == "worker idle"
			 then "idle" else "gone" end) as $key
			| ($key | split(":")[0]) as $pipe
			| .last[$r.worker] as $was
			| (if $r.msg == "worker gone" and $r.t >= $from then .gone += 1 else . end)
			| if $was != null and $was.key != $key and $r.t >= $from then
				.moves += 1
				| if ((.plans[$was.pipe] // -1) >= $was.t) or ((.plans[$pipe] // -1) >= $was.t) then .with_plan += 1
				  elif .loan >= $was.t then .with_loan += 1
				  else .unexplained += [{worker: $r.worker, from: $was.key, to: $key, at: $r.time}] end
			  else . end
			| .last[$r.worker] = {key: $key, pipe: $pipe, t: $r.t}
		else . end)
	| {assignments: {moves, with_plan, with_loan, unexplained: (.unexplained | length),
	   first_unexplained: .unexplained[:5], new_plans_by_trigger: .triggers, loan_changes: .loans,
	   workers_gone: .gone}}' <"$out/up.log"

summaries=$(for f in "$out"/load-*.out "$out"/step-*.out; do tail -1 "$f"; done | jq -sc '
	{sent: (map(.sent) | add), ok: (map(.ok) | add), lost: (map(.lost) | add),
	 slo_violation_ratio: ((map(.slo_violation_ratio * .sent) | add) / (map(.sent) | add) * 10000 | round / 10000)}' ||
	echo null)
jq -nc --arg load0 "$load0" --arg load1 "$load1" --argjson ticks "$(getconf CLK_TCK)" --argjson cpu0 "$cpu0" \
	--argjson cpu1 "$cpu1" --argjson span "$(awk -v a="$load_at" -v b="$end_at" 'BEGIN {print b - a}')" \
	--argjson up_s "$(awk -v a="$started" -v b="$up_at" 'BEGIN {printf "%.1f", b - a}')" --argjson loads "$summaries" '
	{run: {up_after_s: $up_s, load_average_start: $load0, load_average_end: $load1,
	  up_cpu_share: (($cpu1 - $cpu0) / $ticks / $span * 1000 | round / 1000), loads: $loads}}'
