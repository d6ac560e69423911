#!/bin/bash
# usage: [VENV=/tmp/embbench] [TSV=install.tsv] measure_install.sh LABEL pip-args...
#   appends label, seconds, MB added to the venv's site-packages, and the pip args to $EMBBENCH_OUT/$TSV
label=$1; shift
VENV="${VENV:-/tmp/embbench}"
SP="$VENV/lib/python3.11/site-packages"
OUT="${EMBBENCH_OUT:-/tmp/embbench/out}/${TSV:-install.tsv}"
b=$(du -sm "$SP" | cut -f1); t0=$(date +%s.%N)
"$VENV/bin/pip" install -q "$@" 2>&1 | grep -v "^WARNING: Location" | tail -3
t1=$(date +%s.%N); a=$(du -sm "$SP" | cut -f1)
printf "%s\t%.1f\t%d\t%s\n" "$label" "$(echo "$t1-$t0" | bc)" $((a-b)) "$*" | tee -a "$OUT"
