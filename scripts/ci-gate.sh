#!/usr/bin/env bash
# Gate a prompt change in CI: probe each prompt as it is at BASELINE_REF and as it is in the
# working tree in one paired run, always keep an HTML report and a markdown comparison, and fail
# when a candidate is reliably worse (exit 4, a FAIL: line per metric, Holm-adjusted over the
# metrics compared). The GitHub Action of this repository (action.yml) runs this script.
#
#   scripts/ci-gate.sh BASELINE_REF PROMPT [PROMPT...]
#
# BASELINE_REF  a git ref holding the baseline (e.g. origin/main); each prompt's bytes are taken
#               from it with `git show REF:PATH`
# PROMPT        a prompt file in the working tree (the candidate), relative to the repository.
#               One prompt: its arms are `baseline` and `candidate`; several: `NAME.baseline`
#               and `NAME.candidate` (NAME the file's stem), all in the same run, each compared
#               at alpha / (number of prompts) so the job's false-alarm rate stays at alpha
#
# Environment (all optional):
#   PROBESET         the probe set (default probes/refusal-header.toml)
#   CONFIG           the target config (default ./probe.toml, else examples/demo/probe.toml)
#   MODEL            a model spec, or NAME=SPEC (default: the config's [run] models)
#   GATE_METRICS     metrics to gate on, e.g. "refusal_recall header_present" (default: all)
#   ALPHA            the job's false-alarm rate (default 0.05)
#   PROBE_RUN_ARGS   more flags for `probe run`, e.g. "-n 5" or "--until-decided"
#   OUT              where run.json, probe-run.txt, report.html and comparison.md go (default .)
#   PROBE            the probe command (default probe)
#   PROBE_RUNS_DIR   where the run directory goes (probe's own default: ./runs)
#
# The run directory is written to $OUT/probe-run.txt (and RUN= to $GITHUB_ENV when set) as soon
# as the run ends, before anything else can fail; report.html and comparison.md are always
# written, even when the run could not start. When set, $GITHUB_STEP_SUMMARY gets the
# comparison and $GITHUB_OUTPUT gets comparison=, report=, run= and out= (paths). Exit codes:
# 0 not worse; 4 worse; otherwise probe run's own code (1 some samples failed after retries,
# 2 bad input, 3 could not start).
set -uo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: scripts/ci-gate.sh BASELINE_REF PROMPT [PROMPT...]" >&2
    exit 2
fi
baseline_ref=$1
shift
prompts=("$@")
probe=${PROBE:-probe}
out=${OUT:-.}
probeset=${PROBESET:-probes/refusal-header.toml}
alpha=${ALPHA:-0.05}
if [ -n "${CONFIG:-}" ]; then
    config=$CONFIG
elif [ -f probe.toml ]; then
    config=probe.toml
else
    config=examples/demo/probe.toml
fi
mkdir -p "$out"
report="$out/report.html"
comparison="$out/comparison.md"
title="## promptprobe: ${prompts[*]} against ${baseline_ref}"

output() {
    # A step output for the next steps of a GitHub Actions job (the comment step reads comparison).
    if [ -n "${GITHUB_OUTPUT:-}" ]; then
        echo "$1=$2" >>"$GITHUB_OUTPUT"
    fi
}

summary() {
    # The comparison in the job's summary page.
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
        cat "$comparison" >>"$GITHUB_STEP_SUMMARY"
    fi
}

no_report() {
    # A page for the artifact step and a comparison for the comment step, even without a run.
    printf '<!doctype html>\n<meta charset="utf-8"><title>promptprobe gate</title>\n<p>%s</p>\n' "$1" >"$report"
    printf '%s\n\n%s\n' "$title" "$1" >"$comparison"
    summary
}

output out "$out"
output report "$report"
output comparison "$comparison"

# The arms: baseline/candidate for one prompt; NAME.baseline/NAME.candidate for several.
prompt_args=()
prefixes=()
for prompt in "${prompts[@]}"; do
    name=$(basename "$prompt")
    stem=${name%.*}
    prefix=""
    if [ "${#prompts[@]}" -gt 1 ]; then
        prefix="${stem}."
        for seen in "${prefixes[@]}"; do
            if [ "$seen" = "$prefix" ]; then
                echo "ci-gate: two prompts are called ${stem}: give files of different names" >&2
                no_report "Two prompts are called ${stem}; the gate needs files of different names."
                exit 2
            fi
        done
    fi
    prefixes+=("$prefix")
    baseline="$out/baseline-${name}"
    if ! git show "${baseline_ref}:${prompt}" >"$baseline"; then
        echo "ci-gate: ${prompt} does not exist at ${baseline_ref}: nothing to compare against" >&2
        no_report "No baseline: ${prompt} does not exist at ${baseline_ref}."
        exit 2
    fi
    prompt_args+=(--prompt "${prefix}baseline=${baseline}" --prompt "${prefix}candidate=${prompt}")
done

model_args=()
if [ -n "${MODEL:-}" ]; then
    model_args=(--model "$MODEL")
fi
# shellcheck disable=SC2086  # PROBE_RUN_ARGS is a list of flags
"$probe" run "$probeset" --config "$config" "${prompt_args[@]}" \
    "${model_args[@]}" ${PROBE_RUN_ARGS:-} --format json >"$out/run.json"
run_status=$?

run=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["run"])' "$out/run.json" 2>/dev/null)
if [ -z "$run" ]; then
    echo "ci-gate: probe run did not start a run (exit ${run_status}); see the lines above" >&2
    no_report "probe run could not start (exit ${run_status}); the job log says why."
    exit "$run_status"
fi
echo "$run" >"$out/probe-run.txt"
output run "$run"
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
# Each prompt is its own comparison: Bonferroni across them keeps the job's rate at alpha.
each_alpha=$(awk -v a="$alpha" -v k="${#prompts[@]}" 'BEGIN { printf "%.6g", a / k }')

gate_status=0
{
    echo "$title"
    echo
    echo "Run \`$(basename "$run")\`: each prompt as it is at \`${baseline_ref}\` (A) against the pull request (B)."
    if [ "${#prompts[@]}" -gt 1 ]; then
        echo "${#prompts[@]} prompts, each compared at alpha ${each_alpha} (${alpha} over the prompts)."
    fi
} >"$comparison"
for i in "${!prompts[@]}"; do
    prefix=${prefixes[$i]}
    section="$out/comparison-${i}.md"
    "$probe" compare "${run}#prompt=${prefix}baseline" "${run}#prompt=${prefix}candidate" \
        "${metric_args[@]}" --alpha "$each_alpha" --fail-if-worse --format md -o "$section"
    status=$?
    if [ "$status" -ne 0 ] && [ "$status" -ne 4 ]; then
        echo "ci-gate: probe compare failed on ${prompts[$i]} (exit ${status})" >&2
        printf 'probe compare failed on %s (exit %s); the job log says why.\n' "${prompts[$i]}" "$status" >"$section"
        gate_status=$status
    elif [ "$status" -eq 4 ] && [ "$gate_status" -eq 0 ]; then
        gate_status=4
    fi
    verdict="not worse"
    if [ "$status" -eq 4 ]; then
        verdict="**worse**"
    fi
    {
        echo
        echo "### ${prompts[$i]}: ${verdict}"
        echo
        cat "$section"
    } >>"$comparison"
    cat "$section"
done
summary

if [ "$gate_status" -ne 0 ]; then
    exit "$gate_status"
fi
if [ "$run_status" -ne 0 ]; then
    echo "ci-gate: not worse, but probe run ended with exit ${run_status} (failed samples count against their arm)" >&2
fi
exit "$run_status"
