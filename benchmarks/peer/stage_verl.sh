#!/usr/bin/env bash
# stage_verl.sh -- verl 0.9.1 and what it needs beyond the GPU machine's image and megarl's staged site, for
# benchmarks/peer_verl.py (issue #47); run on the CPU machine from the checkout root:
#
#   bash benchmarks/peer/stage_verl.sh        # writes .verlsite/ (git-ignored): wheels, ray/, install_verl.sh
#
# Then on the GPU machine (the checkout's .devsite staged first: ../shared/device/README.md), carry ".verlsite" and
#   bash .devsite/install.sh && bash .verlsite/install_verl.sh && python benchmarks/peer_verl.py run ...
# verl's pins (hydra-core: omegaconf < 2.4 and antlr4 4.9) clash with megarl's site (omegaconf 2.4, antlr4 4.13), so
# install_verl.sh puts these in a site of their own, /tmp/verlsite, ahead of /tmp/site for verl's processes only.
# Ray: the device image has none and its wheel (79 MB) exceeds a call's carry; ../shared/device/stage.sh packs it
# trimmed (23 MB), here into a scratch checkout so that the checkout's own .devsite stays as it is.
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
OUT="$ROOT/.verlsite"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
WHEELS="verl==0.9.1 tensordict==0.10.0 transferqueue==0.1.11 hydra-core==1.3.2 omegaconf==2.3.0 pylatexenc==2.11
  torchdata==0.11.0 cachetools==8.0.2 pyvers==0.1.0 codetiming==1.4.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12
  python-multipart==0.0.34"
mkdir -p "$OUT/ray"
# shellcheck disable=SC2086  # one argument per pin
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
  -d "$OUT" $WHEELS
# antlr4 4.9.3 is a source package only: a pure-Python wheel of it
python3 -m pip wheel -q --no-deps -w "$OUT" antlr4-python3-runtime==4.9.3
scratch=$(mktemp -d)
git -C "$scratch" init -q
CHECKOUT="$scratch" bash "$ROOT/../shared/device/stage.sh" ray
cp "$scratch"/.devsite/c0/* "$OUT/ray/" && cp "$scratch/.devsite/MANIFEST" "$OUT/ray/MANIFEST"
rm -rf "$scratch"
cp "$ROOT/benchmarks/peer/install_verl.sh" "$OUT/"
grep -qx '/.verlsite/' "$ROOT/.git/info/exclude" || echo '/.verlsite/' >> "$ROOT/.git/info/exclude"
echo "[stage_verl] $(du -sh "$OUT" | cut -f1) in $OUT: carry \".verlsite\" (with .devsite/install.sh and MANIFEST)"
