#!/bin/sh
# Renders an `mpi_trainer report` page in headless Chromium and checks that the screenshot is not
# blank (the page's charts and tables drawn): a benchmark of the report as a browser shows it, not
# a test. Installs Debian's chromium when missing (apt-get, with sudo when not root).
#
# usage: bench/report_screenshot.sh [REPORT_DIR_OR_INDEX_HTML [SCREENSHOT.png]]
#   default: a report of tests/golden/report/quickstart.jsonl written into a temporary directory;
#   the screenshot defaults to report_screenshot.png beside the page.
# Prints the screenshot's path, size, distinct colours and pixel standard deviation, then
# "screenshot: ok" (exit 0) or "screenshot: blank" (exit 1).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3

case "${1:-}" in
  -h|--help)
    echo "usage: bench/report_screenshot.sh [REPORT_DIR_OR_INDEX_HTML [SCREENSHOT.png]]"
    sed -n '2,/^set -eu/{/^set -eu/d;s/^# \{0,1\}//;p}' "$0"
    exit 0 ;;
esac
if [ $# -ge 1 ]; then
  case "$1" in
    *.html) INDEX=$1 ;;
    *) INDEX=$1/index.html ;;
  esac
else
  OUT=$(mktemp -d /tmp/report_screenshot.XXXXXX)
  "$PY" "$ROOT/mpi_trainer/report/report.py" "$ROOT/tests/golden/report/quickstart.jsonl" -o "$OUT" >/dev/null
  INDEX=$OUT/index.html
fi
[ -f "$INDEX" ] || { echo "report_screenshot: $INDEX: no such file" >&2; exit 2; }
INDEX=$(cd "$(dirname "$INDEX")" && pwd)/$(basename "$INDEX")
SHOT=${2:-$(dirname "$INDEX")/report_screenshot.png}

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "report_screenshot: installing chromium (apt-get)" >&2
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >/dev/null
fi

# A fresh profile each time; chromium's own chatter (dbus, GPU) goes to a log, not the terminal.
PROFILE=$(mktemp -d /tmp/report_screenshot_profile.XXXXXX)
trap 'rm -rf "$PROFILE"' EXIT
LOG=$PROFILE/chromium.log
start=$(date +%s.%N)
if ! timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$PROFILE" --screenshot="$SHOT" --window-size=1280,2400 "file://$INDEX" >"$LOG" 2>&1; then
  echo "report_screenshot: chromium failed:" >&2
  tail -5 "$LOG" >&2
  exit 1
fi
end=$(date +%s.%N)
echo "report_screenshot: chromium rendered $INDEX in $(awk "BEGIN{printf \"%.2f\", $end - $start}") s"

"$PY" - "$SHOT" <<'EOF'
import sys
from PIL import Image, ImageStat

path = sys.argv[1]
img = Image.open(path).convert("RGB")
colors = img.getcolors(maxcolors=1 << 24) or []
std = sum(ImageStat.Stat(img).stddev) / 3
small = img.resize((64, 120))
nonwhite_rows = sum(1 for y in range(small.height)
                    if any(sum(small.getpixel((x, y))) < 720 for x in range(small.width)))
print(f"screenshot: {path} {img.width}x{img.height}, {len(colors)} distinct colours, "
      f"pixel std {std:.1f}, {nonwhite_rows}/{small.height} rows with ink")
ok = len(colors) >= 200 and std >= 15 and nonwhite_rows >= small.height // 2
print("screenshot: ok" if ok else "screenshot: blank")
sys.exit(0 if ok else 1)
EOF
