#!/usr/bin/env bash
# The study runner (bench/paper/run.py, issue 20) end to end on its smallest experiments (S kind,
# seconds): Table I and the revocation timelines of Figs. 1 and 4 through `mpi_trainer plan`, and
# Fig. 3 from the revocation models. The report
# has each table with the paper's numbers beside ours and the shape goals; each figure is written
# as PNG and SVG. (Whether a shape goal is met is the benchmark's business: exit 1 then, 0 when
# all are; anything else is an error.)
# Usage: test_paper_runner.sh TRAINER SOURCE_DIR
set -uo pipefail
trainer=$1 src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
/usr/bin/python3 "$src/bench/paper/run.py" --trainer "$trainer" --only table1,fig3,fig4 --draws 20 --out "$dir" > "$dir/log" 2>&1
rc=$?
cat "$dir/log"
[[ $rc -le 1 ]] || { echo "FAIL: run.py exit $rc"; exit 1; }
r="$dir/reproduction.md"
for want in "## Table I" "| 4 K80 transient + PS on demand | 1.05 h |" "## Fig. 3" "| all GPU types | 10.0% | 20.0% |" \
            "## Figs. 1 and 4" "| 4 | " "## Shape goals" "every row's time within 15% of the paper's | met"; do
  grep -qF -- "$want" "$r" || { echo "FAIL: the report lacks '$want'"; cat "$r"; exit 1; }
done
for f in paper_table1 paper_fig3 paper_fig4; do
  for ext in png svg; do [[ -s "$dir/figures/$f.$ext" ]] || { echo "FAIL: no $f.$ext"; exit 1; }; done
done
# An E experiment (virtual-clock runs with real gradients) runs only when asked, here for 8 steps
# on generated data: Fig. 5's accuracy rows, their table and plot.
"$trainer" gen-data "$dir/data" --train 512 --test 64 --seed 5 >/dev/null  # 4 data slots of a batch (128) each
/usr/bin/python3 "$src/bench/paper/run.py" --trainer "$trainer" --only fig5_accuracy --kinds S,E --e-steps 8 \
  --e-data "$dir/data" --out "$dir/e" > "$dir/elog" 2>&1 || { echo "FAIL: the E experiment"; cat "$dir/elog"; exit 1; }
for want in "## Fig. 5, accuracy" "| dynamic, adaptive rate (the paper's) |" "8 global steps"; do
  grep -qF -- "$want" "$dir/e/reproduction.md" || { echo "FAIL: the E report lacks '$want'"; cat "$dir/e/reproduction.md"; exit 1; }
done
[[ -s "$dir/e/figures/paper_fig5_accuracy.png" ]] || { echo "FAIL: no E plot"; exit 1; }
/usr/bin/python3 "$src/bench/paper/run.py" --trainer "$trainer" --only fig5_accuracy --out "$dir/s" > /dev/null 2>&1
grep -q "Not run this time.*Fig. 5, accuracy" "$dir/s/reproduction.md" ||
  { echo "FAIL: an S-only report does not list the E experiment it left out"; exit 1; }
# A missing experiment and a missing trainer are errors, with what to do.
/usr/bin/python3 "$src/bench/paper/run.py" --trainer "$trainer" --only nosuch --out "$dir" > "$dir/e1" 2>&1
[[ $? -eq 1 ]] && grep -q "no experiment 'nosuch'" "$dir/e1" || { echo "FAIL: unknown experiment"; cat "$dir/e1"; exit 1; }
/usr/bin/python3 "$src/bench/paper/run.py" --trainer "$dir/none" --out "$dir" > "$dir/e2" 2>&1
[[ $? -eq 1 ]] && grep -q "no trainer at" "$dir/e2" || { echo "FAIL: missing trainer"; cat "$dir/e2"; exit 1; }
echo "PASS: bench/paper/run.py: Table I, Figs. 1/4 and 3 with the paper alongside, plots, goals; an E experiment on request"
