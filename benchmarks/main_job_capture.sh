#!/usr/bin/env bash
# The README's main job as a terminal shows it: `mpsup bench` run in a tmux pane of WIDTH columns (a fresh
# MPSUP_HOME), the pane captured when it ends, with its line count and wall time (issue 25).
#   usage: bash benchmarks/main_job_capture.sh WIDTH OUT [BENCH ARGS...]
#   a paired run and its verdict: REPORT=1 bash benchmarks/main_job_capture.sh 80 OUT --candidate /other/venv/bin/python
#   (REPORT=1: `mpsup report` runs in the same pane when bench ends, and the capture holds both)
set -eu
width=$1
out=$2
shift 2
args=""
for a in "$@"; do args="$args $(printf '%q' "$a")"; done
home=$(mktemp -d /tmp/mpsup-capture-XXXXXX)
session=mpsup-capture-$$
py=${PYTHON:-$(command -v python)}
then_report=""
[ -n "${REPORT:-}" ] && then_report="echo && echo '\$ mpsup report' && MPSUP_HOME='$home' '$py' -m mpsup report;"
tmux new-session -d -s "$session" -x "$width" -y 200 \
  "cd '$PWD' && clear && echo \"\\\$ mpsup bench$args\" && start=\$(date +%s) && MPSUP_HOME='$home' '$py' -m mpsup bench$args; $then_report \
   echo \"[wall \$(( \$(date +%s) - start )) s]\" > '$home/wall'; sleep 600"
while [ ! -f "$home/wall" ]; do sleep 2; done
tmux capture-pane -p -t "$session" -S - | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' > "$out"
tmux kill-session -t "$session"
echo "$(wc -l < "$out") lines at $width columns, $(cat "$home/wall")" >&2
rm -rf "$home"
