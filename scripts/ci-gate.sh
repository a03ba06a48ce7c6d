#!/usr/bin/env bash
# Gate a prompt change in CI: probe the prompt as it is at BASELINE_REF and as it is in the
# working tree in one paired run, always keep an HTML report, and fail when the candidate is
# reliably worse (exit 4, a FAIL: line per metric, Holm-adjusted over the metrics compared).
#
#   scripts/ci-gate.sh BASELINE_REF PROMPT
#
# BASELINE_REF  a git ref holding the baseline (e.g. origin/main); the prompt's bytes are taken
#               from it with `git show REF:PATH`
# PROMPT        the prompt file in the working tree (the candidate), relative to the repository
#
# Environment (all optional):
#   PROBESET         the probe set (default probes/refusal-header.toml)
#   CONFIG           the target config (default ./probe.toml, else examples/demo/probe.toml)
#   MODEL            a model spec (default: the config's [run] models)
#   GATE_METRICS     metrics to gate on, e.g. "refusal_recall header_present" (default: all)
#   PROBE_RUN_ARGS   more flags for `probe run`, e.g. "-n 5" or "--until-decided"
#   OUT              where run.json, probe-run.txt and report.html go (default .)
#   PROBE            the probe command (default probe)
#
# The run directory is written to $OUT/probe-run.txt (and RUN= to $GITHUB_ENV when set) as soon
# as the run ends, before anything else can fail; report.html is always written, even when the
# run could not start. Exit codes: 0 not worse; 4 worse; otherwise probe run's own code (1 some
# samples failed after retries, 2 bad input, 3 could not start).
set -uo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: scripts/ci-gate.sh BASELINE_REF PROMPT" >&2
    exit 2
fi
baseline_ref=$1
prompt=$2
probe=${PROBE:-probe}
out=${OUT:-.}
probeset=${PROBESET:-probes/refusal-header.toml}
if [ -n "${CONFIG:-}" ]; then
    config=$CONFIG
elif [ -f probe.toml ]; then
    config=probe.toml
else
    config=examples/demo/probe.toml
fi
mkdir -p "$out"
report="$out/report.html"

no_report() {
    # A page for the artifact step even when there is no run to report on.
    printf '<!doctype html>\n<meta charset="utf-8"><title>promptprobe gate</title>\n<p>%s</p>\n' "$1" >"$report"
}

name=$(basename "$prompt")
baseline="$out/baseline-${name}"
if ! git show "${baseline_ref}:${prompt}" >"$baseline"; then
    echo "ci-gate: ${prompt} does not exist at ${baseline_ref}: nothing to compare against" >&2
    no_report "No baseline: ${prompt} does not exist at ${baseline_ref}."
    exit 2
fi

model_args=()
if [ -n "${MODEL:-}" ]; then
    model_args=(--model "$MODEL")
fi
# shellcheck disable=SC2086  # PROBE_RUN_ARGS is a list of flags
"$probe" run "$probeset" --config "$config" \
    --prompt "baseline=${baseline}" --prompt "candidate=${prompt}" \
    "${model_args[@]}" ${PROBE_RUN_ARGS:-} --format json >"$out/run.json"
run_status=$?

run=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["run"])' "$out/run.json" 2>/dev/null)
if [ -z "$run" ]; then
    echo "ci-gate: probe run did not start a run (exit ${run_status}); see the lines above" >&2
    no_report "probe run could not start (exit ${run_status}); the job log says why."
    exit "$run_status"
fi
echo "$run" >"$out/probe-run.txt"
if [ -n "${GITHUB_ENV:-}" ]; then
    echo "RUN=${run}" >>"$GITHUB_ENV"
fi
echo "ci-gate: run ${run}" >&2

if ! "$probe" report "$run" --format html -o "$report"; then
    no_report "probe report failed on ${run}; the job log says why."
fi

metric_args=(--all)
if [ -n "${GATE_METRICS:-}" ]; then
    metric_args=()
    for metric in $GATE_METRICS; do
        metric_args+=(--metric "$metric")
    done
fi
"$probe" compare "${run}#prompt=baseline" "${run}#prompt=candidate" "${metric_args[@]}" --fail-if-worse
gate_status=$?

if [ "$gate_status" -ne 0 ]; then
    exit "$gate_status"
fi
if [ "$run_status" -ne 0 ]; then
    echo "ci-gate: not worse, but probe run ended with exit ${run_status} (failed samples count against their arm)" >&2
fi
exit "$run_status"
