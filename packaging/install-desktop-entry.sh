#!/usr/bin/env bash
# Puts SpecScope in the desktop's application menu, for the current user (freedesktop: GNOME, KDE, Xfce, ...):
# a `specscope` link in ~/.local/bin, the .desktop entry and the icons (SVG + PNG sizes).
#   bash install-desktop-entry.sh            from inside the bundle folder (dist/specscope/, or wherever it was copied)
#   bash install-desktop-entry.sh --remove   takes them away again
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -x "$here/specscope" ]; then                        # inside the bundle
  app="$here/specscope" icons="$here/_internal/assets/icons" entry="$here/specscope.desktop"
else                                                     # in the repository: packaging/
  app="$here/../dist/specscope/specscope" icons="$here/../assets/icons" entry="$here/specscope.desktop"
fi
data="${XDG_DATA_HOME:-$HOME/.local/share}" bin="$HOME/.local/bin"
sizes="16 24 32 48 64 128 256 512"

if [ "${1:-}" = "--remove" ]; then
  rm -f "$bin/specscope" "$data/applications/specscope.desktop" "$data/icons/hicolor/scalable/apps/specscope.svg"
  for s in $sizes; do rm -f "$data/icons/hicolor/${s}x${s}/apps/specscope.png"; done
  echo "SpecScope removed from the menu"
  exit 0
fi
[ -x "$app" ] || { echo "no bundle at $app: build it first with bash packaging/build.sh" >&2; exit 1; }
mkdir -p "$bin"
ln -sf "$(cd "$(dirname "$app")" && pwd)/specscope" "$bin/specscope"
install -Dm644 "$icons/specscope.svg" "$data/icons/hicolor/scalable/apps/specscope.svg"
for s in $sizes; do install -Dm644 "$icons/specscope-$s.png" "$data/icons/hicolor/${s}x${s}/apps/specscope.png"; done
# Exec and TryExec name the bundle's own executable, so the entry works even where ~/.local/bin is not on PATH
sed -e "s|^Exec=specscope|Exec=$bin/specscope|" -e "s|^TryExec=specscope|TryExec=$bin/specscope|" "$entry" \
  | install -Dm644 /dev/stdin "$data/applications/specscope.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$data/applications" || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$data/icons/hicolor" || true
echo "SpecScope is in the application menu (run: specscope)"
