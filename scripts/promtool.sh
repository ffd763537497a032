#!/usr/bin/env bash
# Prints the path of a promtool binary, fetching it once when none is on PATH: Debian's `prometheus` package is
# downloaded (apt-get download: no root, nothing installed, no service started) and only its promtool is unpacked
# into ~/.cache/drifttool/promtool/. Used by scripts/test.sh for tests/monitor/test_promtool_rules.py.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then command -v promtool; exit 0; fi
DEST=${XDG_CACHE_HOME:-$HOME/.cache}/drifttool/promtool
if [ ! -x "$DEST/usr/bin/promtool" ]; then
  command -v apt-get >/dev/null 2>&1 || { echo "promtool: not on PATH and no apt-get to fetch it" >&2; exit 1; }
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  chmod 755 "$TMP"  # apt's _apt user writes the download here
  (cd "$TMP" && apt-get download -q prometheus >/dev/null 2>&1) || {
    echo "promtool: apt-get download prometheus failed" >&2; exit 1; }
  mkdir -p "$DEST"
  dpkg-deb -x "$TMP"/prometheus_*.deb "$TMP/x"
  mkdir -p "$DEST/usr/bin" && cp "$TMP/x/usr/bin/promtool" "$DEST/usr/bin/promtool"
fi
echo "$DEST/usr/bin/promtool"
