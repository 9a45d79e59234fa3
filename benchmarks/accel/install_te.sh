#!/usr/bin/env bash
# install_te.sh -- run on the GPU machine, from the checkout root; the GPU-side half of benchmarks/accel/stage_te.sh:
#
#   bash .devsite/install.sh && bash benchmarks/accel/install_te.sh && . /tmp/tesite/env.sh && python ...
#
# Collects the carried part(s) .tesite/p*/te.tar.xz.NN under /tmp/tesite-parts/<sha>/ (any order, any number per
# call); once every part named in .tesite/MANIFEST is there and the sha256 matches, it unpacks Transformer Engine
# 2.20.2 into its own dir, /tmp/tesite, then
#   * moves in each of _maybe/{pyyaml,protobuf,packaging} only where python cannot import that module already;
#   * compiles the torch extension from _build/ (the sdist) when the bundle has no prebuilt one, or when
#     TE_FORCE_BUILD=1 (e.g. the prebuilt one does not load): MAX_JOBS=16, NVTE_CUDA_ARCHS=90, g++ against this
#     python's torch, CUDA headers from /usr/local/cuda + the nvidia/* wheels, cuDNN-frontend headers from _build/;
#   * writes /tmp/tesite/env.sh: sources /tmp/site/env.sh (if there and not yet sourced), then appends /tmp/tesite to
#     PYTHONPATH, and puts the nvidia/nccl/lib of this python on LD_LIBRARY_PATH (libtransformer_engine.so needs
#     libnccl.so.2, which otherwise only an earlier `import torch` brings in);
#   * checks `import transformer_engine.pytorch as te` (prints transformer_engine.__version__: te.__version__ does not
#     exist in 2.20) once per machine, again while it fails;
#     when the prebuilt extension is what fails (other system libraries, undefined symbols), it builds it here once
#     (TE_AUTO_BUILD=0: don't) and checks again.
# Idempotent: a later call on the same warm machine finds /tmp/tesite ready and returns at once.
# Exit status: 0 ready; 3 parts still missing (it names the folder to carry next); 4 installed but the import check
# failed; 1 error.
# env: PYTHON (default python3: the image's torch python), TESITE (/tmp/tesite), TESITE_PARTS (/tmp/tesite-parts),
#      TESITE_DIR (default <checkout>/.tesite), DEVSITE_ENV (/tmp/site/env.sh), TE_FORCE_BUILD=1, TE_AUTO_BUILD (1),
#      MAX_JOBS (16).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
D=${TESITE_DIR:-$ROOT/.tesite}
M="$D/MANIFEST"
[ -f "$M" ] || { echo "[install_te] no $M: run benchmarks/accel/stage_te.sh (CPU machine) and carry .tesite/MANIFEST" >&2; exit 1; }
SHA=$(awk '$1=="sha256"{print $2}' "$M"); N=$(awk '$1=="chunks"{print $2}' "$M"); V=$(awk '$1=="te_version"{print $2}' "$M")
T=${TESITE:-/tmp/tesite}; STAGE=${TESITE_PARTS:-/tmp/tesite-parts}/${SHA:0:16}
SITE_ENV=${DEVSITE_ENV:-/tmp/site/env.sh}; SITE_DIR=$(dirname "$SITE_ENV")
PY=$(command -v "${PYTHON:-python3}") || { echo "[install_te] no ${PYTHON:-python3}" >&2; exit 1; }
SP=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
t0=$(date +%s)

write_env() {
  {
    echo "# source me: . $T/env.sh   (written by benchmarks/accel/install_te.sh): $SITE_ENV first, then $T after it"
    echo "if [ -f $SITE_ENV ]; then case \":\${PYTHONPATH:-}:\" in *:$SITE_DIR:*) ;; *) . $SITE_ENV ;; esac; fi"
    echo "case \":\${PYTHONPATH:-}:\" in *:$T:*) ;; *) export PYTHONPATH=\${PYTHONPATH:+\$PYTHONPATH:}$T ;; esac"
    if [ -d "$SP/nvidia/nccl/lib" ]; then
      echo "case \":\${LD_LIBRARY_PATH:-}:\" in *:$SP/nvidia/nccl/lib:*) ;; *) export LD_LIBRARY_PATH=$SP/nvidia/nccl/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} ;; esac"
    fi
  } > "$T/env.sh"
}

check() {  # the import, in a clean subshell with env.sh; prints the version (TE 2.20's transformer_engine.pytorch
  # has no __version__: the top-level package's; megatron-core reads that one too)
  # shellcheck source=/dev/null
  ( . "$T/env.sh" && cd /tmp && "$PY" -c \
      "import transformer_engine as t, transformer_engine.pytorch as te, transformer_engine_torch; print(t.__version__)" )
}

finish() {
  write_env
  if [ -e "$T/.checked-$SHA" ]; then
    echo "[install_te] $T holds TE $V (bundle ${SHA:0:12}); now: . $T/env.sh"; exit 0; fi
  if v=$(check 2>"$T/check.err"); then
    touch "$T/.checked-$SHA"
    echo "[install_te] import transformer_engine.pytorch: $v ($(( $(date +%s) - t0 ))s); now: . $T/env.sh"; exit 0
  fi
  # a prebuilt extension that this image's system libraries or torch reject: build it here, once, and check again
  if [ ! -e "$T/_build/built" ] && [ "${TE_AUTO_BUILD:-1}" = 1 ] \
     && grep -qE "transformer_engine_torch|GLIBC|undefined symbol" "$T/check.err"; then
    tail -3 "$T/check.err" >&2; echo "[install_te] the prebuilt torch extension does not load here: building it" >&2
    build_ext
    if v=$(check 2>"$T/check.err"); then
      touch "$T/.checked-$SHA"
      echo "[install_te] import transformer_engine.pytorch: $v ($(( $(date +%s) - t0 ))s); now: . $T/env.sh"; exit 0
    fi
  fi
  tail -15 "$T/check.err" >&2
  [ -f "$SITE_ENV" ] || echo "[install_te] note: no $SITE_ENV (TE imports pydantic, which /tmp/site holds): run .devsite/install.sh first" >&2
  echo "[install_te] installed into $T, but the import check failed (exit 4); TE_FORCE_BUILD=1 rebuilds the extension here" >&2
  exit 4
}

build_ext() {  # compile transformer_engine_torch from _build/ against this python's torch, unpack its wheel into $T
  local B CH CINC log
  B=$(mktemp -d /tmp/tesite-build.XXXXXX); log=$T/_build/build.log
  tar -C "$B" -xzf "$T/_build/transformer_engine_torch-$V.tar.gz"
  CH=${CUDA_HOME:-/usr/local/cuda}; CINC=""; [ -d "$CH/include/crt" ] && CINC=$CH/include:
  echo "[install_te] compiling transformer_engine_torch $V (33 C++ files, MAX_JOBS=${MAX_JOBS:-16}; log $log)"
  if ! ( cd "$B/transformer_engine_torch-$V" && env PATH="$(dirname "$PY"):$PATH" CUDA_HOME="${CINC:+$CH}" \
      NVTE_BUILD_USE_NVIDIA_WHEELS=1 NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_CUDA_ARCHS=90 NVTE_NO_LOCAL_VERSION=1 \
      NVTE_RELEASE_BUILD=0 MAX_JOBS="${MAX_JOBS:-16}" PYTHONPATH="$T/_build/py" \
      CPATH="$CINC$T/_build/include:$SP/nvidia/cudnn/include:$SP/nvidia/nccl/include:$SP/nvidia/cu13/include" \
      "$PY" setup.py -q bdist_wheel -d "$B/dist" ) > "$log" 2>&1; then
    grep -E "error|Error" "$log" | head -20 >&2; tail -5 "$log" >&2
    echo "[install_te] build failed (log $log)" >&2; rm -rf "$B"; exit 1
  fi
  rm -rf "$T"/transformer_engine/wheel_lib/transformer_engine_torch.*.so "$T"/transformer_engine_torch-*.dist-info
  unzip -q -o "$B"/dist/transformer_engine_torch-*.whl -d "$T"
  rm -rf "$B"; touch "$T/_build/built"
  echo "[install_te] built the torch extension in $(( $(date +%s) - t0 ))s"
}

if [ -e "$T/.tesite-$SHA" ]; then
  if [ "${TE_FORCE_BUILD:-0}" = 1 ]; then build_ext; rm -f "$T/.checked-$SHA"; fi
  finish
fi

# gather parts (copied, so the order of the calls does not matter)
mkdir -p "$STAGE"
for f in "$D"/p*/te.tar.xz.[0-9][0-9]; do
  [ -e "$f" ] || continue
  b=$(basename "$f"); i=$((10#${b##*.}))
  [ -e "$STAGE/$b.ok" ] && continue
  want=$(awk -v i="$i" '$1=="part" && $2==i {print $3}' "$M")
  if [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$want" ]; then
    echo "[install_te] $f does not match .tesite/MANIFEST (stale part?); re-run stage_te.sh and carry its output" >&2; exit 1; fi
  cp "$f" "$STAGE/$b" && touch "$STAGE/$b.ok" && echo "[install_te] got part $i (of 0..$((N-1)))"
done
missing=(); for i in $(seq 0 $((N-1))); do
  [ -e "$STAGE/te.tar.xz.$(printf %02d "$i").ok" ] || missing+=("$i"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[install_te] have $((N-${#missing[@]})) of $N parts; next call: carry [\".tesite/p${missing[0]}\", \".tesite/MANIFEST\"]"
  echo "[install_te] start that call within 30 s of this one ending, or the machine (and the parts it holds) is gone"
  exit 3
fi

# all parts here: verify, unpack
cat "$STAGE"/te.tar.xz.[0-9][0-9] > "$STAGE/te.tar.xz"
echo "$SHA  $STAGE/te.tar.xz" | sha256sum -c --quiet - || { echo "[install_te] bundle sha256 mismatch" >&2; rm -rf "$STAGE"; exit 1; }
rm -rf "$T" && mkdir -p "$T"
if command -v xz >/dev/null; then xz -T0 -dc "$STAGE/te.tar.xz" | tar -C "$T" -xf -
else "$PY" -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$STAGE/te.tar.xz" "$T"; fi
rm -rf "$STAGE"
echo "[install_te] unpacked bundle ${SHA:0:12} ($(du -sh --apparent-size "$T" | cut -f1)) into $T in $(( $(date +%s) - t0 ))s"

# _maybe/<pkg>: only where the image (and /tmp/site) lacks the module
for d in "$T"/_maybe/*/; do
  [ -f "$d/.import" ] || continue
  mod=$(cat "$d/.import")
  # shellcheck source=/dev/null
  if ( if [ -f "$SITE_ENV" ]; then . "$SITE_ENV"; fi; cd /tmp && "$PY" -c "import $mod" ) >/dev/null 2>&1; then continue; fi
  rm -f "$d/.import"; cp -a "$d". "$T/" && echo "[install_te] $(basename "$d"): not importable here, installed from the bundle"
done
rm -rf "$T/_maybe"

if [ "${TE_FORCE_BUILD:-0}" = 1 ] || ! compgen -G "$T/transformer_engine/wheel_lib/transformer_engine_torch.*.so" >/dev/null; then build_ext; fi
touch "$T/.tesite-$SHA"
finish
