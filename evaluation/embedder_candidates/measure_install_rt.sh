#!/bin/bash
# usage: measure_install.sh LABEL pip-args...  -> appends label, seconds, MB delta to out/install.tsv
label=$1; shift
SP=/tmp/embbench_rt/lib/python3.11/site-packages
b=$(du -sm $SP | cut -f1); t0=$(date +%s.%N)
/tmp/embbench_rt/bin/pip install -q "$@" 2>&1 | grep -v "^WARNING: Location" | tail -3
t1=$(date +%s.%N); a=$(du -sm $SP | cut -f1)
printf "%s\t%.1f\t%d\t%s\n" "$label" $(echo "$t1-$t0"|bc) $((a-b)) "$*" | tee -a /tmp/embbench/out/install_rt.tsv
