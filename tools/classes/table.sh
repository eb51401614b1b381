#!/usr/bin/env bash
# InferLine's evaluation in the simulator (docs/classes.md): the traffic example on two server classes, cost per hour
# and SLO miss rate of Sleipnir's planner (loki), InferLine and InferLine's coarse-grained baselines, on Gamma
# arrivals, per CV, SLO and rate; one markdown row per point, the systems side by side, each cell "cost per hour
# (miss rate)".
#
#   tools/classes/table.sh                                   # the defaults below
#   RATES="100" SLOS="600" CVS="4" tools/classes/table.sh
#
# Each point is one `bin/sleipnir sim` run with SYSTEMS, and one more with --check and CHECKED (when set): the
# commands are printed above the table, and the summaries' JSON lines kept in $OUT (default: a temporary directory).
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
systems=${SYSTEMS:-loki,loki:none,inferline,cg-mean,cg-peak}
checked=${CHECKED-loki:none}
flags=${FLAGS:-} # more sim flags for every run, e.g. FLAGS=--check-edge=false
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

common="--servers $servers --price $prices --workload constant:RATE:$duration --cv CV --warmup $warmup --seed $seed${flags:+ $flags}"
echo "    $bin sim --pipeline SPEC_SLO $common --policy $systems --json"
[ -n "$checked" ] && echo "    $bin sim --pipeline SPEC_SLO $common --policy $checked --check --json"
echo "    # SPEC_SLO: $spec with slo_ms: SLO"
echo
cols=(${systems//,/ })
[ -n "$checked" ] && cols+=("$checked+check")
head="| CV | SLO ms | QPS |"
rule="|---:|---:|---:|"
for s in "${cols[@]}"; do
	head+=" $s |"
	rule+="---:|"
done
echo "$head cg-peak / ${cols[-1]} |"
echo "$rule---:|"
cell='" \(.mean_cost_per_hour * 100 | round / 100) (\(.slo_violation_ratio * 10000 | round / 100)%) |"'
for cv in $cvs; do
	for slo in $slos; do
		sed "s/^slo_ms: .*/slo_ms: $slo/" "$spec" >"$out/spec-$slo.yaml"
		for rate in $rates; do
			run=(sim --pipeline "$out/spec-$slo.yaml" --servers "$servers" --price "$prices"
				--workload "constant:$rate:$duration" --cv "$cv" --warmup "$warmup" --seed "$seed" --json --progress=false
				$flags)
			f="$out/cv$cv-slo$slo-qps$rate.json"
			"$bin" "${run[@]}" --policy "$systems" >"$f"
			if [ -n "$checked" ]; then
				"$bin" "${run[@]}" --policy "$checked" --check | jq -c '.system += "+check"' >>"$f"
			fi
			row="| $cv | $slo | $rate |"
			for s in "${cols[@]}"; do
				row+=$(jq -r --arg s "$s" "select(.system == \$s or (.system | startswith(\$s + \":\"))) | $cell" "$f" | head -1)
			done
			ratio=$(jq -rs --arg last "${cols[-1]}" '
				(map(select(.system | startswith("cg-peak:"))) | .[0].mean_cost_per_hour) as $peak |
				(map(select(.system == $last or (.system | startswith($last + ":")))) | .[0].mean_cost_per_hour) as $ref |
				if $ref > 0 then "\($peak / $ref * 10 | round / 10)x" else "-" end' "$f")
			echo "$row $ratio |"
		done
	done
done
