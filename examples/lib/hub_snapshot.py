"""A Hugging Face hub model downloaded once for examples/pretrained/run.sh: the folder that both
``docctx-prepare --pretrained`` and ``fairseq-train --init-from-pretrained`` then read.

    HF_HUB_CACHE=DOWNLOADS/hf-hub python examples/lib/hub_snapshot.py OWNER/NAME[@REVISION] OUT.json

The download is ``docctx-prepare``'s own (:func:`fairseq_docctx.data.hf_release.resolve`:
``huggingface_hub.snapshot_download`` of the configuration, tokenizer and PyTorch/safetensors
weights into the hub cache, resumable); OUT.json records ``dir`` (the snapshot folder, named by
its commit), ``repo_id``, ``revision`` (the 40-hex commit the revision resolved to) and
``requested`` (``null``: the default branch). A hub that cannot give the model is one line.
"""
import json
import os
import sys


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.exit("usage: hub_snapshot.py OWNER/NAME[@REVISION] OUT.json")
    # this checkout's plugin (the recipe runs from the repository root, the script from examples/lib)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from fairseq_docctx.data.hf_release import HUB_ID, resolve
    from fairseq_docctx.data.release_common import PretrainedError

    spec, out = args
    if not HUB_ID.match(spec) or os.path.exists(spec):
        sys.exit(f"hub_snapshot.py: error: {spec}: not a hub id OWNER/NAME[@REVISION]")
    try:
        where = resolve(spec)
    except PretrainedError as e:
        sys.exit(f"hub_snapshot.py: error: {e}")
    with open(out + ".part", "w", encoding="utf-8") as f:
        json.dump(where, f, indent=1)
    os.replace(out + ".part", out)
    print(f"hub_snapshot.py: {where['repo_id']} at revision {where['revision']} in {where['dir']}")


if __name__ == "__main__":
    main()
