#!/usr/bin/env bash
# stage_fa4.sh -- stage FlashAttention-4 (the flash-attn project's CuTe-DSL package, `flash-attn-4`: Hopper and
# Blackwell kernels written in Python that compile at their first call) for the GPU machine. Run on the CPU machine,
# from the checkout root; install_fa4.sh is the GPU-side half.
#
#   bash benchmarks/accel/stage_fa4.sh     # writes .fa4site/ (git-excluded): p0/, p1/ ... (fa4.tar.xz.NN) + MANIFEST
#
# What goes in (one tree, as `pip install --target` lays it out, packed as tar.xz, split into parts <= CHUNK_BYTES):
# flash-attn-4 and the CUTLASS DSL it compiles with (its CUDA 13 libraries: a 193 MB MLIR compiler library), quack
# and torch-c-dlpack-ext, einops. Not: torch, cuda-bindings (torch 2.11+cu130 requires it), apache-tvm-ffi (in
# /tmp/site), and the DSL's qnx/aarch64 stubs. The wheels and the packed tree are cached.
# env: FA4SITE_CACHE (default ~/.cache/megarl-fa4site), CHUNK_BYTES (default 30000000: a part fits one call beside
#      .tesite's 30 MB), XZ_LEVEL (default -9e).
set -euo pipefail
CACHE=${FA4SITE_CACHE:-$HOME/.cache/megarl-fa4site}
CHUNK_BYTES=${CHUNK_BYTES:-30000000}
XZ_LEVEL=${XZ_LEVEL:--9e}
[ -d .git ] || { echo "stage_fa4: run from the checkout root" >&2; exit 2; }
PINS=(flash-attn-4==4.0.0b40 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
      nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 quack-kernels==0.6.5
      torch-c-dlpack-ext==0.1.5 einops==0.8.2)
KEY=$(printf '%s\n' "${PINS[@]}" "$XZ_LEVEL" | sha256sum | cut -c1-16)
BUNDLE=$CACHE/fa4-$KEY.tar.xz
mkdir -p "$CACHE/whl"

if [ ! -s "$BUNDLE" ]; then
  echo "[stage_fa4] downloading ${#PINS[@]} wheels (the DSL's CUDA 13 libraries are 92 MB)"
  python3 -m pip download -q --pre --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --disable-pip-version-check -d "$CACHE/whl" "${PINS[@]}" 2>&1 | grep -v "is ignored: it is neither" || true
  TREE=$(mktemp -d "$CACHE/tree.XXXXXX")
  python3 -m pip install -q --no-deps --no-index --find-links "$CACHE/whl" --target "$TREE" --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --only-binary=:all: --disable-pip-version-check "${PINS[@]}"
  rm -rf "${TREE:?}/nvidia_cutlass_dsl/cu13/lib/stubs" "${TREE:?}/bin"
  find "$TREE" -name __pycache__ -prune -exec rm -rf {} +
  echo "[stage_fa4] packing $(du -sh "$TREE" | cut -f1) with xz $XZ_LEVEL (about 4 min on 2 cores)"
  tar -C "$TREE" -cf - . | xz "$XZ_LEVEL" -T0 > "$BUNDLE.tmp" && mv "$BUNDLE.tmp" "$BUNDLE"
  rm -rf "$TREE"
fi

rm -rf .fa4site && mkdir -p .fa4site
split -b "$CHUNK_BYTES" -d -a 2 "$BUNDLE" .fa4site/fa4.tar.xz.
N=0
{
  echo "# megarl FlashAttention-4 bundle; written by benchmarks/accel/stage_fa4.sh; read by install_fa4.sh"
  echo "sha256 $(sha256sum "$BUNDLE" | cut -d' ' -f1)"
  for f in .fa4site/fa4.tar.xz.*; do
    mkdir -p ".fa4site/p$N" && mv "$f" ".fa4site/p$N/"
    echo "part $N $(sha256sum ".fa4site/p$N/$(basename "$f")" | cut -d' ' -f1)"; N=$((N + 1))
  done
  echo "chunks $N"
  printf 'pin %s\n' "${PINS[@]}"
} > .fa4site/MANIFEST.tmp && mv .fa4site/MANIFEST.tmp .fa4site/MANIFEST
grep -qx '/.fa4site/' .git/info/exclude 2>/dev/null || echo '/.fa4site/' >> .git/info/exclude
for i in $(seq 0 $((N - 1))); do
  echo "[stage_fa4] call $((i + 1)): carry [\".fa4site/p$i\", \".fa4site/MANIFEST\"] ($(du -sh ".fa4site/p$i" | cut -f1))"
done
