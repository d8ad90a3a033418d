#!/usr/bin/env bash
# Builds and runs Herald's libFuzzer targets (the package in this folder).
#
#   Fuzz/run.sh build                       build every target (debug, fuzzer and address sanitizers)
#   Fuzz/run.sh fuzz [SECONDS] [TARGET...]  fuzz each target for SECONDS (default 60); crashes go to Fuzz/Crashes/TARGET/
#   Fuzz/run.sh replay [TARGET...]          run each target once over Fuzz/Corpus/TARGET/ and Fuzz/Crashes/TARGET/
#                                           (and Fuzz/Known/TARGET/, libmicrohttpd's own findings, passed over)
#
# fuzz and replay exit nonzero when a target crashes (or finds a leak or a hang). A fuzzing run reads the committed
# seeds and writes what it adds under Fuzz/.build-fuzz/runs/: Fuzz/Corpus/ changes only when someone copies inputs in.
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
scratch="$fuzz_dir/.build-fuzz"
targets_all=(route query multipart headers draft cursor media idempotency tus)

# The targets that run a MicroHTTP server in the process: what its threads allocate is not the input's, so libFuzzer's
# per-input leak check is off for them (it also costs a stop-the-world scan per input: ten times slower).
is_live() { [[ "$1" == query || "$1" == multipart || "$1" == headers ]]; }

# The longest input worth generating, per target.
max_len() {
    case "$1" in
        media) echo 64 ;;
        idempotency) echo 300 ;;
        route | cursor) echo 512 ;;
        query | headers) echo 2048 ;;
        *) echo 4096 ;;
    esac
}

# libFuzzer's own stack trace, not the Swift runtime's backtracer (which can take half a minute per crash).
export SWIFT_BACKTRACE=enable=no

build() {
    mkdir -p "$scratch"
    local log="$scratch/build.log" started=$SECONDS status=0
    # One -sanitize= list: given twice, swiftc keeps only one of them (and SwiftPM orders its own flags at random).
    # SwiftPM's --sanitize=fuzzer is what makes it link libFuzzer's main instead of the target's own.
    swift build -c debug --package-path "$fuzz_dir" --scratch-path "$scratch" \
        --sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address >"$log" 2>&1 || status=$?
    # Left out: the linker's hundreds of "Cannot export local symbol" warnings, and the errors of Herald's
    # EmbedFilesTool, a plugin's tool that SwiftPM also compiles with the fuzzer flags (and so as a library, which its
    # top-level code cannot be). No fuzz target uses that plugin. The whole output is in the log.
    awk '/Cannot export local symbol/ { next }
         /Sources\/EmbedFilesTool\/main\.swift:/ { skipping = 1 }
         skipping && /^$/ { skipping = 0; next }
         skipping || /emit-module command failed/ { next }
         { print }' "$log"
    echo "build: exit $status after $((SECONDS - started)) s (full output: ${log#"$PWD/"})"
    return "$status"
}

executable() { echo "$scratch/debug/$1"; }

require_built() {
    local target
    for target in "$@"; do
        [[ -x "$(executable "$target")" ]] || { echo "$target is not built: run '$0 build' first" >&2; exit 2; }
    done
}

fuzz() {
    local seconds=60
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
        seconds="$1"
        shift
    fi
    local targets=("$@")
    [[ $# -gt 0 ]] || targets=("${targets_all[@]}")
    require_built "${targets[@]}"
    local run_dir="$scratch/runs/$(date +%Y%m%d-%H%M%S)" failed=() summary=() records=() target
    for target in "${targets[@]}"; do
        local work="$run_dir/$target" crashes="$fuzz_dir/Crashes/$target" log="$run_dir/$target.log" status=0
        mkdir -p "$work" "$crashes"
        local options=(-max_total_time="$seconds" -timeout=25 -max_len="$(max_len "$target")" -print_final_stats=1
            -artifact_prefix="$crashes/")
        is_live "$target" && options+=(-detect_leaks=0)
        echo "== $target: ${seconds}s, log ${log#"$PWD/"}"
        # New inputs go to the run's own folder (the first); the committed seeds are only read.
        FUZZ_SKIP_KNOWN=1 "$(executable "$target")" "${options[@]}" "$work" "$fuzz_dir/Corpus/$target" >"$log" 2>&1 ||
            status=$?
        # The last status line's coverage, and the average speed from the final statistics.
        local coverage speed result=ok
        coverage="$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 |
            grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' || true)"
        speed="$(grep -oE 'average_exec_per_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')"
        if [[ $status -ne 0 ]]; then
            failed+=("$target")
            result="CRASHED (exit $status)"
            grep -E 'ERROR: |Fatal error|SUMMARY|Test unit written' "$log" | head -5 || true
        fi
        summary+=("$(printf '%-10s %7s  %-42s %s' "$target" "$speed" "$coverage" "$result")")
        local runs cov ft corpus
        runs="$(grep -oE 'number_of_executed_units: +[0-9]+' "$log" | grep -oE '[0-9]+$' || echo null)"
        cov="$(grep -oE 'cov: [0-9]+' <<<"$coverage" | grep -oE '[0-9]+' || echo null)"
        ft="$(grep -oE 'ft: [0-9]+' <<<"$coverage" | grep -oE '[0-9]+' || echo null)"
        corpus="$(grep -oE 'corp: [0-9]+' <<<"$coverage" | grep -oE '[0-9]+' || echo null)"
        records+=("{\"name\": \"$target\", \"runs\": $runs, \"exec_per_second\": ${speed/\?/null}, \"coverage\": $cov, \"features\": $ft, \"corpus\": $corpus, \"crashes\": $([[ $status -eq 0 ]] && echo 0 || echo 1)}")
    done
    printf '%s\n' "" "$(printf '%-10s %7s  %-42s %s' target exec/s coverage result)" "${summary[@]}"
    # For Reliability/run.py (RELIABILITY.md): the same figures as JSON.
    if [[ -n "${FUZZ_JSON_OUT:-}" ]]; then
        local joined
        joined="$(IFS=,; echo "${records[*]}")"
        echo "{\"seconds\": $seconds, \"targets\": [$joined]}" >"$FUZZ_JSON_OUT"
    fi
    if [[ ${#failed[@]} -gt 0 ]]; then
        echo "crashed: ${failed[*]} (inputs in Fuzz/Crashes/; logs in ${run_dir#"$PWD/"})"
        return 1
    fi
}

replay() {
    local targets=("$@")
    [[ $# -gt 0 ]] || targets=("${targets_all[@]}")
    require_built "${targets[@]}"
    local failed=() target
    for target in "${targets[@]}"; do
        local inputs=() file
        for file in "$fuzz_dir/Corpus/$target"/* "$fuzz_dir/Crashes/$target"/*; do
            [[ -f "$file" && "$file" != *.md ]] && inputs+=("$file")
        done
        [[ ${#inputs[@]} -gt 0 ]] || { echo "== $target: no inputs"; continue; }
        local options=(-timeout=25)
        is_live "$target" && options+=(-detect_leaks=0)
        local log status=0
        log="$(mktemp)"
        "$(executable "$target")" "${options[@]}" "${inputs[@]}" >"$log" 2>&1 || status=$?
        # Findings in libmicrohttpd itself (Fuzz/Known/README.md): each must not crash in any other way.
        local known=()
        for file in "$fuzz_dir/Known/$target"/*; do [[ -f "$file" ]] && known+=("$file"); done
        if [[ $status -eq 0 && ${#known[@]} -gt 0 ]]; then
            FUZZ_SKIP_KNOWN=1 "$(executable "$target")" "${options[@]}" "${known[@]}" >>"$log" 2>&1 || status=$?
            inputs+=("${known[@]}")
        fi
        if [[ $status -eq 0 ]]; then
            echo "== $target: ${#inputs[@]} inputs, ok"
        else
            failed+=("$target")
            echo "== $target: CRASHED (exit $status) on $(grep -oE 'Running: .*' "$log" | tail -1 | sed 's/^Running: //')"
            grep -E 'Fatal error|ERROR: |SUMMARY' "$log" | head -3 || true
        fi
        rm -f "$log"
    done
    if [[ ${#failed[@]} -gt 0 ]]; then
        echo "crashed: ${failed[*]}"
        return 1
    fi
}

case "${1:-}" in
    build) build ;;
    fuzz) shift; fuzz "$@" ;;
    replay) shift; replay "$@" ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
