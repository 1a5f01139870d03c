#!/usr/bin/env bash
# bench/tables/spot_advisor.py (issue 44) on a small repository made here in the layout of
# alexei-led/spotinfo: the rows it keeps (our device types' instances, Linux, every region), the
# commit and checksum the table names, a feed whose bands changed refused; then the shipped table
# read by `plan --revocation-model aws-advisor`, which says each type's band.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/t/internal/spot/data"
ranges='[{"index": 0, "label": "<5%"}, {"index": 1, "label": "5-10%"}, {"index": 2, "label": "10-15%"},
         {"index": 3, "label": "15-20%"}, {"index": 4, "label": ">20%"}]'
cat > "$dir/t/internal/spot/data/spot-advisor-data.json" <<JSON
{"ranges": $ranges, "instance_types": {},
 "spot_advisor": {"us-west-2": {"Linux": {"g4dn.xlarge": {"s": 60, "r": 1}, "c5.large": {"s": 70, "r": 0}},
                                "Windows": {"g5.xlarge": {"s": 50, "r": 2}}},
                  "eu-west-1": {"Linux": {"p4d.24xlarge": {"s": 60, "r": 4}, "m5.xlarge": {"s": 60, "r": 0}}}}}
JSON
git -C "$dir/t" init -q
git -C "$dir/t" -c user.name=t -c user.email=t@t add -A
git -C "$dir/t" -c user.name=t -c user.email=t@t commit -qm feed
commit=$(git -C "$dir/t" rev-parse HEAD)
sum=$(sha256sum "$dir/t/internal/spot/data/spot-advisor-data.json" | cut -d' ' -f1)
/usr/bin/python3 "$root/bench/tables/spot_advisor.py" "$dir/t/.git" --out "$dir/bands.csv"
cat "$dir/bands.csv"
grep -q "commit $commit" "$dir/bands.csv"
grep -q "sha256 $sum" "$dir/bands.csv"
grep -q "# Not in the feed: g6.xlarge, g5.xlarge, p3.2xlarge, p5.48xlarge." "$dir/bands.csv"
# Regions in order; Windows rows and instances of no device type of ours left out.
rows=$(grep -v '^#' "$dir/bands.csv" | tr '\n' ' ')
[[ $rows == "a100x8,p4d.24xlarge,eu-west-1,>20% ps,m5.xlarge,eu-west-1,<5% t4,g4dn.xlarge,us-west-2,5-10% " ]] ||
  { echo "FAIL: rows '$rows'"; exit 1; }
# A feed whose bands are not AWS's five is refused rather than misread.
sed -i 's/"15-20%"/"15-25%"/' "$dir/t/internal/spot/data/spot-advisor-data.json"
git -C "$dir/t" -c user.name=t -c user.email=t@t commit -qam changed
if /usr/bin/python3 "$root/bench/tables/spot_advisor.py" "$dir/t/.git" 2> "$dir/err"; then
  echo "FAIL: a changed band was taken"; exit 1
fi
grep -q "its format changed" "$dir/err"
# The shipped table came from the feed it names; plan says which band each type got.
grep -q "commit 05e933139449b888c78795b28af8e9370429a031" "$root/mpi_trainer/plan/revocation_aws_bands.csv"
"$1" plan --workers 2 --worker-types v100 --prices aws --steps 1000 --draws 5 --revocation-model aws-advisor:eu-west-1 \
  > "$dir/plan.txt"
cat "$dir/plan.txt"
grep -q "lifetimes: aws-advisor:eu-west-1 v100 (p3.2xlarge in eu-west-1, AWS interruption band >20%" "$dir/plan.txt"
grep -q "lifetimes: aws-advisor:eu-west-1 ps (m5.xlarge in eu-west-1, AWS interruption band 10-15%" "$dir/plan.txt"
if "$1" plan --workers 2 --worker-types v100 --prices aws --revocation-model 'aws-band:>20%' 2> "$dir/err"; then
  echo "FAIL: >20% gave a lifetime"; exit 1
fi
grep -q "no upper edge" "$dir/err"
echo "ok: spot_advisor.py: 3 rows of 5, commit and checksum named, a changed feed refused; plan reads the bands"
