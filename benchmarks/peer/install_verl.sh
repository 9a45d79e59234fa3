#!/usr/bin/env bash
# install_verl.sh -- run on the GPU machine, from the repo root, AFTER .devsite/install.sh (our /tmp/site stack);
# benchmarks/peer/stage_verl.sh copies it into .verlsite/ beside the wheels it installs:
#
#   bash .devsite/install.sh && bash .verlsite/install_verl.sh && python benchmarks/peer_verl.py run ...
#
# Installs verl 0.9.1 and the packages it needs that neither the device image nor /tmp/site has into their OWN target
# dir, /tmp/verlsite, which env.sh puts BEFORE /tmp/site on PYTHONPATH (for verl runs only):
#   * .verlsite/*.whl           pip --target /tmp/verlsite (no index, no deps, no compile)
#   * .verlsite/ray/site.tar.xz.00  ray 2.60.0 + jsonschema deps, as `stage.sh ray` packs them (jar + web UI trimmed),
#                                   sha256-checked against .verlsite/ray/MANIFEST and unpacked into /tmp/verlsite
# Why a separate dir: hydra-core 1.3.2 needs omegaconf<2.4 + antlr4 4.9.*; /tmp/site has omegaconf 2.4.0 + antlr 4.13.2.
# Then two local edits, both reported:
#   1. verl/utils/model.py load_valuehead_model() hard-codes attn_implementation="flash_attention_2" for the critic;
#      with no flash-attn on the machine that load fails ("install trl"). The edit uses the config's own
#      _attn_implementation (set by critic.model.override_config.attn_implementation=sdpa) and falls back to FA2 as before.
#   2. the wheels' stray top-level packages (verl's tests/ scripts/, TransferQueue's recipe/ tutorial/) are removed so
#      they cannot shadow a checkout's own `tests` package; neither verl nor transfer_queue imports them.
# Idempotent: a marker keyed on the wheel set + ray bundle makes a second call on a warm machine return at once.
# env: VERLSITE (default /tmp/verlsite), PYTHON (default python3), VERL_KEEP_FA2=1 skips edit 1,
#      VERL_PIP_EXTRA (extra pip args; for a dry run on another Python: --python-version 3.12 --platform ... --only-binary=:all:).
set -euo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=${VERLSITE:-/tmp/verlsite}
PY=${PYTHON:-python3}
t0=$(date +%s)

write_env() {
  {
    echo "# source me: . $T/env.sh   (written by .verlsite/install_verl.sh): /tmp/site's env, then $T in front of it"
    echo "if [ -f /tmp/site/env.sh ]; then case \":\${PYTHONPATH:-}:\" in *:/tmp/site:*) ;; *) . /tmp/site/env.sh ;; esac; fi"
    echo "export PYTHONPATH=$T\${PYTHONPATH:+:\$PYTHONPATH}"
    echo "export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1"
  } > "$T/env.sh"
}

shopt -s nullglob
WHEELS=("$D"/*.whl)
[ ${#WHEELS[@]} -gt 0 ] || { echo "[verlsite] no wheels in $D: carry .verlsite" >&2; exit 1; }
RAYM="$D/ray/MANIFEST"
[ -f "$RAYM" ] || { echo "[verlsite] no $RAYM: carry .verlsite/ray" >&2; exit 1; }
KEY=$( (for w in "${WHEELS[@]}"; do basename "$w"; done; awk '$1=="sha256"{print $2}' "$RAYM"; echo "edit-rev 1 ${VERL_KEEP_FA2:-0}") \
       | sha256sum | cut -c1-16)
if [ -e "$T/.verlsite-$KEY" ]; then
  write_env; echo "[verlsite] $T already holds set $KEY; now: . $T/env.sh"; exit 0; fi

rm -rf "$T" && mkdir -p "$T"
# shellcheck disable=SC2086  # VERL_PIP_EXTRA: several arguments
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  ${VERL_PIP_EXTRA:-} --target "$T" "${WHEELS[@]}"

# ray bundle (parts c*/site.tar.xz.NN of `stage.sh ray`, here in .verlsite/ray/)
SHA=$(awk '$1=="sha256"{print $2}' "$RAYM"); N=$(awk '$1=="chunks"{print $2}' "$RAYM")
PARTS=("$D"/ray/site.tar.xz.[0-9][0-9])
[ ${#PARTS[@]} -eq "$N" ] || { echo "[verlsite] ray bundle: have ${#PARTS[@]} of $N parts" >&2; exit 1; }
TMPX=$(mktemp -d)
cat "${PARTS[@]}" > "$TMPX/ray.tar.xz"
echo "$SHA  $TMPX/ray.tar.xz" | sha256sum -c --quiet - || { echo "[verlsite] ray bundle sha256 mismatch" >&2; rm -rf "$TMPX"; exit 1; }
if command -v xz >/dev/null; then xz -T0 -dc "$TMPX/ray.tar.xz" | tar -C "$T" -xf -
else "$PY" -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$TMPX/ray.tar.xz" "$T"; fi
rm -rf "$TMPX" "$T/.devsite-packages"

# edit 1: critic value head without flash-attn (see header)
M="$T/verl/utils/model.py"
if [ "${VERL_KEEP_FA2:-0}" != 1 ]; then
  n=$(grep -c 'attn_implementation="flash_attention_2",' "$M" || true)
  [ "$n" = 2 ] || { echo "[verlsite] expected 2 hard-coded flash_attention_2 loads in $M, found $n" >&2; exit 1; }
  sed -i 's/attn_implementation="flash_attention_2",/attn_implementation=getattr(model_config, "_attn_implementation", None) or "flash_attention_2",  # .verlsite edit: SDPA when configured/' "$M"
  echo "[verlsite] edited $M: load_valuehead_model() uses the config's attn_implementation (2 places)"
fi
# edit 2: stray top-level packages
rm -rf "$T/tests" "$T/scripts" "$T/recipe" "$T/tutorial"

touch "$T/.verlsite-$KEY"; write_env
echo "[verlsite] installed ${#WHEELS[@]} wheels + ray bundle ${SHA:0:12} into $T ($(du -sh "$T" | cut -f1)) in $(( $(date +%s) - t0 ))s"
echo "[verlsite] now: . $T/env.sh   (PYTHONPATH=$T:/tmp/site:...)"
