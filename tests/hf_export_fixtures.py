"""Session fixtures of the ``docctx-export transformers`` tests: tiny fairseq models of each
option set the export writes (post-norm and pre-norm, learned and sinusoidal positions, shared
and separate vocabularies; ``transformer``, ``concat_transformer``, ``doc2doc_transformer``),
trained on the toy documents and exported once per session when a test first asks for one;
``tests/test_hf_export.py`` (transformers reads each export as fairseq computes it) and
``tests/test_hf_roundtrip.py`` (``--init-from-pretrained`` an export gives the checkpoint
back) share them. Loaded by conftest.py (``pytest_plugins``).
"""
import pytest

from conftest import REPO, TINY_MODEL, prepare_command, run


def export_folder(ckpt, data, out, *more):
    """``docctx-export transformers CKPT OUT --data DATA [more]`` in this process; ``out``."""
    from fairseq_docctx.cli.export import cli_main as export_main

    code = 0
    try:
        export_main(["transformers", str(ckpt), str(out), "--data", str(data), *more])
    except SystemExit as e:
        code = e.code
    assert code == 0
    return out


@pytest.fixture(scope="session")
def separate_bin(toy_bin, tmp_path_factory):
    """The toy documents with a source and a target dictionary (no --joined-dictionary)."""
    dest = tmp_path_factory.mktemp("hf_separate") / "bin"
    run([c for c in prepare_command(toy_bin.parent / "raw", dest) if c != "--joined-dictionary"])
    return dest


#: the trained models: name -> (data fixture, fairseq-train arguments on top of TINY_MODEL, whether
#: TINY_MODEL's --share-all-embeddings stays, the class expected); None: a conftest checkpoint
MODELS = {
    "sentence": ("toy_bin", None, True, "FSMTForConditionalGeneration"),
    "concat_both": ("toy_bin", None, True, "FSMTForConditionalGeneration"),
    "concat_post2": ("toy_bin", ["--arch", "concat_transformer", "--context-size", "1", "--context-sides", "both",
                                 "--decoder-layers", "2"], True, "FSMTForConditionalGeneration"),
    "concat_src": ("toy_bin", ["--arch", "concat_transformer", "--context-size", "2", "--context-sides", "source"],
                   True, "FSMTForConditionalGeneration"),
    "concat_tgt": ("toy_bin", ["--arch", "concat_transformer", "--context-size", "1", "--context-sides", "target",
                               "--encoder-normalize-before", "--decoder-normalize-before"], True,
                   "M2M100ForConditionalGeneration"),
    "separate": ("separate_bin", ["--arch", "transformer", "--context-size", "0",
                                  "--share-decoder-input-output-embed"], False, "FSMTForConditionalGeneration"),
    "prenorm_concat": ("toy_bin", ["--arch", "concat_transformer", "--context-size", "1", "--context-sides", "both",
                                   "--encoder-normalize-before", "--decoder-normalize-before", "--decoder-layers", "2"],
                       True, "M2M100ForConditionalGeneration"),
    "mbart_like": ("toy_bin", ["--arch", "transformer", "--context-size", "0", "--encoder-normalize-before",
                               "--decoder-normalize-before", "--encoder-learned-pos", "--decoder-learned-pos",
                               "--layernorm-embedding", "--share-decoder-input-output-embed"], False,
                   "MBartForConditionalGeneration"),
    "bart_like": ("toy_bin", ["--arch", "transformer", "--context-size", "0", "--encoder-learned-pos",
                              "--decoder-learned-pos", "--layernorm-embedding"], True, "BartForConditionalGeneration"),
    "doc2doc": ("toy_bin", ["--arch", "doc2doc_transformer", "--doc-mode", "segments", "--max-segment-tokens", "64"],
                True, "FSMTForConditionalGeneration"),
}
#: the models of MODELS that are conftest's session checkpoints
CONFTEST_CHECKPOINTS = {"sentence": "sent_ckpt", "concat_both": "concat_both_ckpt"}


@pytest.fixture(scope="session")
def trained(request, tmp_path_factory):
    """``name -> (checkpoint, data, export folder)``, each trained and exported when first asked."""
    cache = {}

    def get(name):
        if name not in cache:
            data_name, args, shared, _ = MODELS[name]
            data = request.getfixturevalue(data_name)
            root = tmp_path_factory.mktemp(f"hf_{name}")
            if name in CONFTEST_CHECKPOINTS:
                ckpt = request.getfixturevalue(CONFTEST_CHECKPOINTS[name])
            else:
                tiny = [a for a in TINY_MODEL if shared or a != "--share-all-embeddings"]
                run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task",
                     "document_translation", *tiny, *args, "--max-tokens", "1000", "--max-update", "40",
                     "--no-epoch-checkpoints", "--save-dir", root / "ckpt"])
                ckpt = root / "ckpt" / "checkpoint_last.pt"
            cache[name] = (ckpt, data, export_folder(ckpt, data, root / "hf"))
        return cache[name]

    return get
