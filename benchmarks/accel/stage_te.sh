#!/usr/bin/env bash
# stage_te.sh -- stage NVIDIA Transformer Engine 2.20.2 for the GPU machine (run on the CPU machine, from the checkout
# root). Companion of ../shared/device/stage.sh (our /tmp/site stack); install_te.sh is the GPU-side half.
#
#   bash benchmarks/accel/stage_te.sh          # writes .tesite/ (git-excluded): p0[, p1 ...]/te.tar.xz.NN + MANIFEST
#
# What goes in (one tree, packed as tar.xz, split into parts <= CHUNK_BYTES, one folder per part):
#   * transformer-engine 2.20.2 (meta) + transformer-engine-cu13 2.20.2: libtransformer_engine.so (343 MB) is trimmed
#     to the kept GPU archs (TE_KEEP_ARCHS, default 90 = H200): the other archs' cubins in .nv_fatbin are zeroed
#     in place (fatbin_keep_arch.py; nothing moves, so the ELF stays valid, and zeros pack to nothing): 262 MB of
#     xz becomes about 24. Also dropped: transformer_engine/jax (Python only, unused), onnx's test data, the debug
#     info of ml_dtypes' extension, __pycache__.
#   * transformer_engine_torch 2.20.2: a source package; by default (TE_PREBUILD=1) it is compiled HERE into a
#     cp312 wheel against torch 2.11.0+cu130 (the GPU image's torch; the PyPI wheel is that build) in a Python 3.12
#     venv under the cache, with CUDA 13.0 / cuDNN 9.19 / NCCL headers from pip wheels. It is a CppExtension: g++
#     only, no nvcc, no GPU. 33 C++ files, about 25 min on 2 cores the first time; cached afterwards.
#   * what `import transformer_engine.pytorch` needs that neither the image nor /tmp/site has: einops,
#     nvdlfw-inspect, onnx 1.17 (protobuf >= 3.20; newer onnx needs protobuf >= 6.31), onnxscript, onnx-ir, ml-dtypes.
#   * _maybe/<pkg>: pyyaml, protobuf, packaging: install_te.sh moves each in only where python cannot import it.
#   * _build/: the sdist, `wheel`, and cuDNN-frontend headers: install_te.sh compiles the torch extension on the GPU
#     machine when no prebuilt one is in the tree (TE_PREBUILD=0) or when asked (TE_FORCE_BUILD=1 there).
# Adds /.tesite/ to .git/info/exclude and prints the carry list for every call.
# env: CHECKOUT (default: current dir), TESITE_CACHE (default ~/.cache/megarl-tesite), CHUNK_BYTES (default 50000000),
#      TE_KEEP_ARCHS (default "90"; "all" = no trim), TE_PREBUILD (default 1), XZ_LEVEL (default -9),
#      PY312 (a Python 3.12 for the build venv; default: python3.12 on PATH).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECKOUT=$(cd "${CHECKOUT:-$PWD}" && pwd -P)
CACHE=${TESITE_CACHE:-$HOME/.cache/megarl-tesite}
CHUNK_BYTES=${CHUNK_BYTES:-50000000}
KEEP=${TE_KEEP_ARCHS:-90}
PREBUILD=${TE_PREBUILD:-1}
XZ_LEVEL=${XZ_LEVEL:--9}
TE_VER=2.20.2

git -C "$CHECKOUT" rev-parse --git-dir >/dev/null 2>&1 || { echo "stage_te: $CHECKOUT is not a git checkout" >&2; exit 2; }
[ "$(git -C "$CHECKOUT" rev-parse --show-toplevel)" = "$CHECKOUT" ] || { echo "stage_te: run from the checkout root (or set CHECKOUT)" >&2; exit 2; }

# ---- pins
TE_WHEELS=("transformer-engine==$TE_VER" "transformer-engine-cu13==$TE_VER")
DEPS=(einops==0.8.2 nvdlfw-inspect==0.2.2 onnx==1.17.0 onnxscript==0.7.2 onnx-ir==1.1.0 ml-dtypes==0.5.4)
MAYBE=(pyyaml==6.0.4:yaml protobuf==5.29.5:google.protobuf packaging==25.0:packaging)   # spec:import name
BUILD_WHEELS=(wheel==0.45.1 nvidia-cudnn-frontend==1.32.0)
SDIST=transformer_engine_torch-$TE_VER.tar.gz   # pip cannot download it here (its metadata step needs a CUDA torch)
SDIST_URL=https://files.pythonhosted.org/packages/3d/fb/c9ce298a38c22ed1059923a01cac7e1f4e4f7281d39a8679c8118febe079/$SDIST
SDIST_SHA=4c40ced8a6261649e689076f198d4feaf02277b1ba18931a66eccdaceb33c43e
# build venv (only with TE_PREBUILD=1): torch 2.11.0 from PyPI is +cu130; importing it needs its CUDA wheels. PyPI
# has no nvidia-nccl-cu13 2.28.9 (torch's pin), so 2.32.3 (the extension calls no NCCL function; only headers).
VENV_TORCH="torch==2.11.0"   # installed --no-deps (its nccl pin), then the rest with their deps:
VENV_PKGS=("cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx,crt,cccl,nvml]==13.0.2"
  nvidia-cudnn-cu13==9.19.0.56 nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-nccl-cu13==2.32.3
  "cuda-bindings>=13.0.3,<14" filelock fsspec jinja2 networkx sympy typing-extensions "setuptools<82" wheel==0.45.1
  packaging nvidia-cudnn-frontend==1.32.0)

mkdir -p "$CACHE/whl" "$CACHE/build"
P=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
   --platform manylinux2014_x86_64)
wheel_for() {  # cached wheel of name==version
  local n v f fn
  n=$(echo "${1%%==*}" | tr 'A-Z_.' 'a-z--'); v=${1#*==}
  for f in "$CACHE"/whl/*.whl; do
    [ -e "$f" ] || continue
    fn=$(basename "$f" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
    [ "$fn" = "$n" ] && [ "$(basename "$f" | cut -d- -f2)" = "$v" ] && { echo "$f"; return 0; }
  done
  return 1
}
ALL_SPECS=("${TE_WHEELS[@]}" "${DEPS[@]}" "${BUILD_WHEELS[@]}")
for m in "${MAYBE[@]}"; do ALL_SPECS+=("${m%%:*}"); done
missing=(); for s in "${ALL_SPECS[@]}"; do wheel_for "$s" >/dev/null || missing+=("$s"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[stage_te] downloading ${#missing[@]} wheels (transformer-engine-cu13 is 276 MB)"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${P[@]}" \
    --disable-pip-version-check -d "$CACHE/whl" "${missing[@]}" 2>&1 | grep -v "is ignored: it is neither" || true
fi
for s in "${ALL_SPECS[@]}"; do wheel_for "$s" >/dev/null || { echo "stage_te: no wheel for $s" >&2; exit 1; }; done
if [ ! -s "$CACHE/$SDIST" ] || [ "$(sha256sum "$CACHE/$SDIST" | cut -d' ' -f1)" != "$SDIST_SHA" ]; then
  echo "[stage_te] downloading $SDIST"
  curl -sSfL -o "$CACHE/$SDIST.tmp" "$SDIST_URL" && mv "$CACHE/$SDIST.tmp" "$CACHE/$SDIST"
  [ "$(sha256sum "$CACHE/$SDIST" | cut -d' ' -f1)" = "$SDIST_SHA" ] || { echo "stage_te: $SDIST sha256 mismatch" >&2; exit 1; }
fi

# ---- the torch extension, compiled here (cached: $CACHE/build/dist/transformer_engine_torch-*.whl)
EXT_WHL=""
if [ "$PREBUILD" = 1 ]; then
  V="$CACHE/build/venv"; SRC="$CACHE/build/src"; DIST="$CACHE/build/dist"
  ext_whl() { local f; for f in "$DIST"/transformer_engine_torch-"$TE_VER"-cp312-cp312-*.whl; do [ -e "$f" ] && echo "$f"; return 0; done; }
  EXT_WHL=$(ext_whl)
  if [ -z "$EXT_WHL" ]; then
    PY312=${PY312:-$(command -v python3.12 || true)}
    [ -n "$PY312" ] || { echo "stage_te: no python3.12 (set PY312, or TE_PREBUILD=0 to build on the GPU machine)" >&2; exit 1; }
    if ! "$V/bin/python" -c "import torch, setuptools, wheel; assert torch.__version__ == '2.11.0+cu130'" 2>/dev/null; then
      echo "[stage_te] build venv: torch 2.11.0+cu130 and its CUDA wheels (about 3 GB, a few minutes)"
      rm -rf "$V" && "$PY312" -m venv "$V"
      { "$V/bin/pip" install -q --disable-pip-version-check --no-deps "$VENV_TORCH"
        "$V/bin/pip" install -q --disable-pip-version-check "${VENV_PKGS[@]}"; } 2>&1 | grep -v "is ignored: it is neither" || true
      "$V/bin/python" -c "import torch; assert torch.__version__ == '2.11.0+cu130', torch.__version__" \
        || { echo "stage_te: build venv: torch 2.11.0+cu130 does not import" >&2; exit 1; }
    fi
    SP=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
    CINC=""; [ -d /usr/local/cuda/include/crt ] && CINC=/usr/local/cuda/include:   # else: nvidia/cu13/include (crt wheel)
    rm -rf "$SRC" && mkdir -p "$SRC" "$DIST" && tar -C "$SRC" -xzf "$CACHE/$SDIST"
    echo "[stage_te] compiling transformer_engine_torch $TE_VER ($(nproc) jobs; about 25 min on 2 cores), log: $CACHE/build/build.log"
    ( cd "$SRC/transformer_engine_torch-$TE_VER" && env PATH="$V/bin:$PATH" CUDA_HOME="${CINC:+/usr/local/cuda}" \
        NVTE_BUILD_USE_NVIDIA_WHEELS=1 NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_CUDA_ARCHS=90 NVTE_NO_LOCAL_VERSION=1 \
        MAX_JOBS="$(nproc)" CPATH="$CINC$SP/include:$SP/nvidia/cudnn/include:$SP/nvidia/nccl/include:$SP/nvidia/cu13/include" \
        "$V/bin/pip" wheel -v --no-build-isolation --no-deps --disable-pip-version-check -w "$DIST" . ) \
        > "$CACHE/build/build.log" 2>&1 || { tail -30 "$CACHE/build/build.log" >&2; echo "stage_te: build failed" >&2; exit 1; }
    EXT_WHL=$(ext_whl); [ -n "$EXT_WHL" ] || { echo "stage_te: build made no wheel" >&2; exit 1; }
  fi
  echo "[stage_te] torch extension: $(basename "$EXT_WHL")"
fi

# ---- the tree (cached by key: wheel names + extension wheel hash + trim rules)
TRIM_REV=3   # bump when the unpack/trim rules below change
WHEELS=(); for s in "${TE_WHEELS[@]}" "${DEPS[@]}"; do WHEELS+=("$(wheel_for "$s")"); done
KEY=$( (for w in "${WHEELS[@]}"; do basename "$w"; done; for m in "${MAYBE[@]}" "${BUILD_WHEELS[@]}"; do echo "$m"; done
        [ -n "$EXT_WHL" ] && sha256sum "$EXT_WHL" | cut -d' ' -f1
        echo "$SDIST_SHA trim $TRIM_REV keep $KEEP $XZ_LEVEL") 2>/dev/null | sha256sum | cut -c1-16)
B="$CACHE/build/tree-$KEY"; echo "[stage_te] bundle key $KEY"
if [ ! -s "$B/te.tar.xz" ]; then
  rm -rf "$B" && mkdir -p "$B/t"; T="$B/t"
  for w in "${WHEELS[@]}" ${EXT_WHL:+"$EXT_WHL"}; do unzip -q -o "$w" -d "$T"; done
  rm -rf "$T/transformer_engine/jax" "$T/onnx/backend/test/data" "$T/onnx/test"   # TE's JAX half; onnx's test data (30 MB)
  strip --strip-debug "$T"/ml_dtypes/*.so   # 24 MB -> 2 MB: debug info only
  if [ "$KEEP" != all ]; then
    # shellcheck disable=SC2086  # one argument per arch
    for so in "$T"/transformer_engine/wheel_lib/libtransformer_engine.so "$T"/transformer_engine/wheel_lib/libnccl_ep.so; do
      python3 "$HERE/fatbin_keep_arch.py" "$so" ${KEEP//[;,]/ }; done
  fi
  for m in "${MAYBE[@]}"; do s=${m%%:*}; mkdir -p "$T/_maybe/${s%%==*}"; unzip -q -o "$(wheel_for "$s")" -d "$T/_maybe/${s%%==*}"
    echo "${m#*:}" > "$T/_maybe/${s%%==*}/.import"; done
  mkdir -p "$T/_build"; cp "$CACHE/$SDIST" "$T/_build/"
  unzip -q -o "$(wheel_for wheel==0.45.1)" -d "$T/_build/py"
  unzip -q -o "$(wheel_for nvidia-cudnn-frontend==1.32.0)" 'include/*' -d "$T/_build"
  find "$T" -name __pycache__ -prune -exec rm -rf {} +
  { for s in "${TE_WHEELS[@]}" "${DEPS[@]}"; do echo "$s"; done; [ -n "$EXT_WHL" ] && echo "transformer-engine-torch==$TE_VER (prebuilt, cp312, torch 2.11.0+cu130)"
    echo "keep_archs $KEEP"; } > "$T/.tesite-packages"
  echo "[stage_te] tree $(du -sh "$T" | cut -f1) (apparent $(du -sh --apparent-size "$T" | cut -f1)); packing (xz $XZ_LEVEL)"
  tar -C "$T" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . \
    | xz -T0 "$XZ_LEVEL" > "$B/te.tar.xz.tmp" && mv "$B/te.tar.xz.tmp" "$B/te.tar.xz"
  du -sk --apparent-size "$T" | cut -f1 > "$B/tree.kb"; rm -rf "$T"
else
  echo "[stage_te] reusing cached bundle $KEY"
fi

# ---- write <checkout>/.tesite
D="$CHECKOUT/.tesite"
EXCL=$(cd "$CHECKOUT" && git rev-parse --git-path info/exclude); case "$EXCL" in /*) ;; *) EXCL="$CHECKOUT/$EXCL";; esac
mkdir -p "$(dirname "$EXCL")"; touch "$EXCL"
grep -qxF '/.tesite/' "$EXCL" || echo '/.tesite/' >> "$EXCL"
rm -rf "$D" && mkdir -p "$D"
SHA=$(sha256sum "$B/te.tar.xz" | cut -d' ' -f1); SIZE=$(stat -c %s "$B/te.tar.xz")
NP=$(( (SIZE + CHUNK_BYTES - 1) / CHUNK_BYTES ))
( cd "$D" && split -n "$NP" -d -a 2 "$B/te.tar.xz" part. )   # NP equal parts, each <= CHUNK_BYTES
N=0; for p in "$D"/part.*; do mkdir -p "$D/p$N"; mv "$p" "$D/p$N/te.tar.xz.$(printf %02d $N)"; N=$((N+1)); done
{
  echo "# megarl Transformer Engine bundle; written by benchmarks/accel/stage_te.sh; read by benchmarks/accel/install_te.sh"
  echo "te_version $TE_VER"
  echo "sha256 $SHA"
  echo "bytes $SIZE"
  echo "chunks $N"
  for i in $(seq 0 $((N-1))); do f="$D/p$i/te.tar.xz.$(printf %02d "$i")"; echo "part $i $(sha256sum "$f" | cut -d' ' -f1) $(stat -c %s "$f")"; done
  echo "unpacked_kb $(cat "$B/tree.kb")"
  echo "keep_archs $KEEP"
  echo "prebuilt_ext $([ -n "$EXT_WHL" ] && basename "$EXT_WHL" || echo none)"
  for s in "${TE_WHEELS[@]}" "${DEPS[@]}"; do echo "pkg $s"; done
  for m in "${MAYBE[@]}"; do echo "maybe ${m%%:*}"; done
} > "$D/MANIFEST"

# ---- report
tree_mb=$(( $(git -C "$CHECKOUT" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1000000 ))
echo "[stage_te] bundle ${SHA:0:12}: $(( SIZE / 1000000 )) MB packed, $(( $(cat "$B/tree.kb") / 1024 )) MB unpacked, $N part(s); tracked tree ~$tree_mb MB"
for i in $(seq 0 $((N-1))); do
  echo "  call $((i+1)) of $N: carry [\".tesite/p$i\", \".tesite/MANIFEST\"]   ($(( $(stat -c %s "$D/p$i/te.tar.xz.$(printf %02d "$i")") / 1000000 )) MB)"
done
echo "  command: bash benchmarks/accel/install_te.sh && . /tmp/tesite/env.sh && <your command>"
echo "  (after .devsite: bash .devsite/install.sh && bash benchmarks/accel/install_te.sh && . /tmp/tesite/env.sh && ...;"
echo "   a call carries at most 64 MiB in all, checkout included: carry the .devsite chunk and a .tesite part in"
echo "   separate calls when together they exceed that; start each next call within 30 s of the previous one ending)"
if git -C "$CHECKOUT" status --short --untracked-files=all | grep -q '\.tesite'; then
  echo "stage_te: WARNING: git status lists .tesite -- check $EXCL" >&2; exit 1; fi
exit 0
