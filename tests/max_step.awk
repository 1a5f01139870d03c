# The highest global step of the progress events in a metrics file (0 when there is none yet):
#   awk -f tests/max_step.awk METRICS.jsonl
# The fault and Slurm tests poll it every 0.1-0.2 s while ranks train beside them on two cores:
# one awk costs about 2 ms where a python3 start cost 30 ms (a quarter of a core at 0.1 s).
/"event":"progress"/ {
  if (split($0, parts, /"global_step":/) >= 2) {
    step = parts[2] + 0
    if (step > max) max = step
  }
}
END { print max + 0 }
