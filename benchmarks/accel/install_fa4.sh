#!/usr/bin/env bash
# install_fa4.sh -- run on the GPU machine, from the checkout root; the GPU-side half of benchmarks/accel/stage_fa4.sh:
#
#   bash .devsite/install.sh && bash benchmarks/accel/install_fa4.sh && . /tmp/fa4site/env.sh && python ...
#
# Collects the carried part(s) .fa4site/p*/fa4.tar.xz.NN under /tmp/fa4site-parts/ (any order, any number per call;
# a warm machine keeps them between calls). Once every part .fa4site/MANIFEST names is there and the sha256 matches,
# unpacks FlashAttention-4 into /tmp/fa4site and writes /tmp/fa4site/env.sh: /tmp/site/env.sh first (if there), then
# /tmp/fa4site and the CUTLASS DSL's package folder on PYTHONPATH (the wheel's .pth file, which would add it, is read
# only in site-packages). Then checks `from flash_attn.cute import flash_attn_varlen_func`.
# Idempotent: on a machine where it already succeeded it returns at once.
# Exit status: 0 ready; 3 parts still missing (it names the folder to carry next); 4 unpacked, import failed; 1 error.
# env: PYTHON (python3), FA4SITE (/tmp/fa4site), DEVSITE_ENV (/tmp/site/env.sh).
set -euo pipefail
D=.fa4site; M=$D/MANIFEST
[ -f "$M" ] || { echo "[install_fa4] no $M: run benchmarks/accel/stage_fa4.sh (CPU machine) and carry .fa4site/MANIFEST" >&2; exit 1; }
SHA=$(awk '$1=="sha256"{print $2}' "$M"); N=$(awk '$1=="chunks"{print $2}' "$M")
T=${FA4SITE:-/tmp/fa4site}; STAGE=/tmp/fa4site-parts/${SHA:0:16}; SITE_ENV=${DEVSITE_ENV:-/tmp/site/env.sh}
PY=${PYTHON:-python3}

check() {
  # shellcheck source=/dev/null
  ( . "$T/env.sh" && cd /tmp && "$PY" -c "from flash_attn.cute import flash_attn_varlen_func; import cutlass; print(cutlass.__file__)" )
}

if [ ! -e "$T/.unpacked-$SHA" ]; then
  mkdir -p "$STAGE"
  for f in "$D"/p*/fa4.tar.xz.[0-9][0-9]; do
    [ -e "$f" ] || continue
    b=$(basename "$f"); i=$((10#${b##*.}))
    [ -e "$STAGE/$b.ok" ] && continue
    if [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$(awk -v i="$i" '$1=="part" && $2==i {print $3}' "$M")" ]; then
      echo "[install_fa4] $f does not match $M (stale part?): re-run stage_fa4.sh and carry its output" >&2; exit 1; fi
    cp "$f" "$STAGE/$b" && touch "$STAGE/$b.ok" && echo "[install_fa4] got part $i (of 0..$((N - 1)))"
  done
  for i in $(seq 0 $((N - 1))); do
    if [ ! -e "$STAGE/fa4.tar.xz.$(printf %02d "$i").ok" ]; then
      echo "[install_fa4] next call (within 30 s of this one): carry [\".fa4site/p$i\", \".fa4site/MANIFEST\"]"; exit 3; fi
  done
  cat "$STAGE"/fa4.tar.xz.[0-9][0-9] > "$STAGE/fa4.tar.xz"
  echo "$SHA  $STAGE/fa4.tar.xz" | sha256sum -c --quiet - || { echo "[install_fa4] bundle sha256 mismatch" >&2; rm -rf "$STAGE"; exit 1; }
  rm -rf "$T" && mkdir -p "$T" && xz -T0 -dc "$STAGE/fa4.tar.xz" | tar -C "$T" -xf - && rm -rf "$STAGE"
  {
    echo "# source me (written by benchmarks/accel/install_fa4.sh)"
    echo "if [ -f $SITE_ENV ]; then case \":\${PYTHONPATH:-}:\" in *:$(dirname "$SITE_ENV"):*) ;; *) . $SITE_ENV ;; esac; fi"
    echo "case \":\${PYTHONPATH:-}:\" in *:$T:*) ;; *) export PYTHONPATH=\${PYTHONPATH:+\$PYTHONPATH:}$T:$T/nvidia_cutlass_dsl/dsl_packages ;; esac"
  } > "$T/env.sh"
  touch "$T/.unpacked-$SHA"
fi
if out=$(check 2>"$T/check.err"); then echo "[install_fa4] FlashAttention-4 imports ($out); now: . $T/env.sh"; exit 0; fi
tail -15 "$T/check.err" >&2; echo "[install_fa4] unpacked into $T, but the import failed (exit 4)" >&2; exit 4
