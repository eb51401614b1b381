#!/usr/bin/env bash
# InferLine's evaluation in the simulator (docs/classes.md): the traffic example on two server classes, cost per hour
# and SLO miss rate of Sleipnir's planner (loki), InferLine and InferLine's coarse-grained baselines, on Gamma
# arrivals, per CV, SLO and rate; one markdown row per point, the systems side by side.
#
#   tools/classes/table.sh                      # the defaults below
#   RATES="100" SLOS="600" CVS="4" tools/classes/table.sh
#
# Each point is one `bin/sleipnir sim` run (the command is printed above the table); the summaries' JSON lines are
# kept in $OUT (default: a temporary directory).
set -euo pipefail
bin=${SLEIPNIR:-bin/sleipnir}
spec=${SPEC:-examples/traffic-classes.yaml}
rates=${RATES:-50 100 200}
slos=${SLOS:-300 600 1000}
cvs=${CVS:-1 4}
duration=${DURATION:-120s}
warmup=${WARMUP:-10s}
seed=${SEED:-1}
servers=${SERVERS:-cpu=400,fast=100}
prices=${PRICES:-cpu=0.4,fast=2.5}
systems=${SYSTEMS:-loki,inferline,cg-mean,cg-peak}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "$bin sim --pipeline SPEC_WITH_SLO --servers $servers --price $prices --workload constant:RATE:$duration --cv CV" \
	"--warmup $warmup --seed $seed --policy $systems --json   # SPEC_WITH_SLO: $spec with slo_ms: SLO"
echo
head="| CV | SLO ms | QPS |"
rule="|---:|---:|---:|"
for s in ${systems//,/ }; do
	head+=" $s \$/h | $s miss |"
	rule+="---:|---:|"
done
echo "$head cg-peak / loki cost |"
echo "$rule---:|"
for cv in $cvs; do
	for slo in $slos; do
		sed "s/^slo_ms: .*/slo_ms: $slo/" "$spec" >"$out/spec-$slo.yaml"
		for rate in $rates; do
			f="$out/cv$cv-slo$slo-qps$rate.json"
			"$bin" sim --pipeline "$out/spec-$slo.yaml" --servers "$servers" --price "$prices" \
				--workload "constant:$rate:$duration" --cv "$cv" --warmup "$warmup" --seed "$seed" \
				--policy "$systems" --json --progress=false >"$f"
			row="| $cv | $slo | $rate |"
			for s in ${systems//,/ }; do
				row+=$(jq -r --arg s "$s" 'select(.system | startswith($s + ":")) |
					" \(.mean_cost_per_hour * 100 | round / 100) | \(.slo_violation_ratio * 10000 | round / 100)% |"' "$f")
			done
			ratio=$(jq -rs 'map({key: (.system | split(":")[0]), value: .mean_cost_per_hour}) | from_entries |
				if .loki > 0 and .["cg-peak"] != null then "\(.["cg-peak"] / .loki * 10 | round / 10)x" else "-" end' "$f")
			echo "$row $ratio |"
		done
	done
done
