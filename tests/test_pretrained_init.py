"""``--init-from-pretrained PATH`` (fairseq_docctx/models/pretrained_init.py): the six
Transformer document models built with a pretrained fairseq checkpoint's network and weights.

The checkpoints are saved by fairseq's own code (``fairseq-train --task translation``) on
the toy documents, with a dictionary that lacks the context separator (``fairseq-preprocess``),
as a public release's does:

* ``transformer``: pre-norm, ``layernorm_embedding``, GELU, learned positions, shared
  embeddings, sizes no architecture has as defaults (the mBART-50 / M2M-100 / NLLB layout);
* ``bart`` (``mbart_large`` at tiny sizes, pre-norm as mBART-25 was trained), with
  ``decoder.output_projection.weight`` removed afterwards, as in the mBART-25 release
  (fairseq issue #1758).

The document data folder is ``docctx-prepare --srcdict`` of that dictionary: the separator
is appended after its ``R`` symbols (row ``R`` is new).
"""
import json
import shutil

import pytest
import torch

from conftest import REPO, run, write_toy_documents

USER_DIR = str(REPO / "fairseq_docctx")

#: the pretrained checkpoints' networks (fairseq-train flags; the same flags build a model
#: from scratch with that network)
NETWORKS = {
    "transformer": ["--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "32",
                    "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48", "--decoder-ffn-embed-dim", "40",
                    "--encoder-attention-heads", "4", "--decoder-attention-heads", "2",
                    "--encoder-normalize-before", "--decoder-normalize-before", "--layernorm-embedding",
                    "--activation-fn", "gelu", "--encoder-learned-pos", "--decoder-learned-pos",
                    "--share-all-embeddings", "--max-source-positions", "256", "--max-target-positions", "256"],
    "bart": ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim",
             "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
             "--decoder-attention-heads", "2", "--encoder-normalize-before", "--decoder-normalize-before",
             "--layernorm-embedding", "--activation-fn", "gelu", "--encoder-learned-pos", "--decoder-learned-pos",
             "--share-all-embeddings", "--max-source-positions", "128", "--max-target-positions", "128"],
}
FAIRSEQ_ARCH = {"transformer": "transformer", "bart": "mbart_large"}

#: each architecture's task options on the toy data
ARCHS = {
    "concat_transformer": ["--context-size", "2", "--context-sides", "both"],
    "han_transformer": ["--context-size", "2", "--context-sides", "both"],
    "qcn_transformer": ["--context-size", "2"],
    "mht_transformer": ["--context-size", "2", "--context-sides", "src,draft"],
    "doc2doc_transformer": ["--context-size", "0", "--doc-mode", "segments"],
    "g_transformer": ["--context-size", "0", "--doc-mode", "segments", "--encoder-ctxlayers", "1",
                      "--decoder-ctxlayers", "1", "--cross-ctxlayers", "1"],
}

#: the training options of the fairseq-train runs
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--cpu", "--num-workers", "0",
         "--no-epoch-checkpoints", "--disable-validation", "--seed", "1", "--log-format", "simple"]


@pytest.fixture(scope="module")
def pre(tmp_path_factory):
    """The toy documents, the pretrained folder P (plain fairseq-preprocess: no separator),
    the document folder D (its dictionary + <sep>), and the two checkpoints (a few updates
    each; about 25 s in all)."""
    root = tmp_path_factory.mktemp("pretrained")
    raw = write_toy_documents(root / "raw")
    run(["fairseq-preprocess", "-s", "src", "-t", "tgt", "--trainpref", raw / "train", "--validpref",
         raw / "valid", "--joined-dictionary", "--destdir", root / "P", "--workers", "1"])
    run(["docctx-prepare", "-s", "src", "-t", "tgt", "--trainpref", raw / "train", "--validpref", raw / "valid",
         "--testpref", raw / "test", "--destdir", root / "D", "--joined-dictionary", "--srcdict",
         root / "P" / "dict.src.txt", "--workers", "1"])
    ckpts = {}
    for cls, net in NETWORKS.items():
        save = root / f"ckpt_{cls}"
        run(["fairseq-train", root / "P", "--task", "translation", "--arch", FAIRSEQ_ARCH[cls], *net,
             "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--max-update", "3", "--cpu",
             "--num-workers", "0", "--save-dir", save, "--no-epoch-checkpoints", "--disable-validation",
             "--seed", "1"])
        ckpts[cls] = save / "checkpoint_last.pt"
    # the mBART-25 release has no decoder.output_projection.weight (fairseq issue #1758)
    state = torch.load(ckpts["bart"], weights_only=False)
    del state["model"]["decoder.output_projection.weight"]
    torch.save(state, root / "mbart_release.pt")
    ckpts["bart"] = root / "mbart_release.pt"
    return {"root": root, "D": root / "D", "P": root / "P", "ckpt": ckpts}


def build(data, arch, *extra, seed=3):
    """``task.build_model`` of ``fairseq-train DATA --task document_translation --arch ARCH
    EXTRA`` in this process; returns (args, task, model)."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", USER_DIR, "--task", "document_translation",
                                                "--arch", arch, *map(str, extra)])
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    return args, task, task.build_model(args)


def _weights(path):
    return torch.load(path, weights_only=False)["model"]


@pytest.mark.parametrize("cls", ["transformer", "bart"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_built_with_the_checkpoints_network_and_weights(pre, arch, cls, capsys, monkeypatch):
    """Sizes and options come from PATH (none given), every PATH weight is in the model, the
    separator's row is new, the average of the checkpoint's rows (so that it never wins the
    argmax where the checkpoint's tokens are), and the report says so. PATH is read once."""
    from fairseq import checkpoint_utils

    path = pre["ckpt"][cls]
    reads, real = [], checkpoint_utils.load_checkpoint_to_cpu
    monkeypatch.setattr(checkpoint_utils, "load_checkpoint_to_cpu",
                        lambda p, *a, **k: reads.append(p) or real(p, *a, **k))
    args, task, model = build(pre["D"], arch, *ARCHS[arch], "--init-from-pretrained", path)
    monkeypatch.undo()
    assert reads.count(str(path)) == 1, reads
    out = capsys.readouterr().out
    net = NETWORKS[cls]
    assert args.encoder_layers == int(net[1]) and args.decoder_layers == int(net[3])
    assert args.encoder_embed_dim == int(net[5]) and args.encoder_ffn_embed_dim == int(net[9])
    assert args.decoder_ffn_embed_dim == int(net[11]) and args.decoder_attention_heads == int(net[15])
    assert args.encoder_normalize_before and args.decoder_normalize_before and args.layernorm_embedding
    assert args.activation_fn == "gelu" and args.encoder_learned_pos and args.share_all_embeddings
    assert args.max_source_positions == int(net[net.index("--max-source-positions") + 1])
    assert len(model.decoder.layers) == int(net[3])
    # applied once: the checkpoint of this model restores its own weights
    assert args.init_from_pretrained is None and args.initialized_from_pretrained == str(path)

    own = model.state_dict()
    ckpt = _weights(path)
    rows = ckpt["encoder.embed_tokens.weight"].shape[0]
    sep = task.source_dictionary.index("<sep>")
    assert sep == rows == len(task.source_dictionary) - 1
    for k, v in ckpt.items():
        assert torch.equal(own[k][: v.shape[0]], v), k
    # bart: the output projection is the embedding table (no weight of its own in the release)
    assert model.decoder.output_projection.weight is model.decoder.embed_tokens.weight
    table = own["encoder.embed_tokens.weight"]
    torch.testing.assert_close(table[sep], ckpt["encoder.embed_tokens.weight"].mean(0))  # pretrained_init.grow
    assert not any(torch.equal(table[sep], r) for r in ckpt["encoder.embed_tokens.weight"])

    assert f"{arch}: --init-from-pretrained {path}: a {cls} checkpoint" in out
    assert "--encoder-layers " + net[1] in out and "--activation-fn gelu" in out
    assert f"rows 0..{rows - 1} from the checkpoint, 1 new: <sep>" in out
    assert "was not prepared with docctx-prepare --pretrained" in out
    assert f"grown: encoder.embed_tokens.weight: rows 0..{rows - 1} loaded, rows {rows}..{rows} new" in out
    if cls == "bart":
        assert "tied: decoder.output_projection.weight is " in out
    grown = sum(k.endswith(("embed_tokens.weight", "output_projection.weight")) for k in ckpt)
    assert f"{len(ckpt) - grown} loaded, {grown} grown, " in out and ", 0 left out" in out
    reported = {line[len("  new: "):] for line in out.splitlines() if line.startswith("  new: ")}
    assert {n for n in own if n not in ckpt and n != "decoder.output_projection.weight"} <= reported
    assert reported.isdisjoint(ckpt)


def test_context_parts_start_as_the_paper_says(pre):
    """g_transformer: the global attentions start as copies of the group attentions
    (``--global-attn-init group``); han/qcn/mht: the context weights are the model's own
    initialisation (the same as from scratch with the same seed)."""
    path = pre["ckpt"]["transformer"]
    _, _, g = build(pre["D"], "g_transformer", *ARCHS["g_transformer"], "--init-from-pretrained", path)
    layer = g.encoder.layers[-1].self_attn
    assert torch.equal(layer.global_attn.q_proj.weight, _weights(path)["encoder.layers.1.self_attn.q_proj.weight"])
    _, _, han = build(pre["D"], "han_transformer", *ARCHS["han_transformer"], "--init-from-pretrained", path)
    _, _, han0 = build(pre["D"], "han_transformer", *ARCHS["han_transformer"], *NETWORKS["transformer"])
    a, b = han.state_dict(), han0.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a if ".han." in k)


def test_g_transformer_context_layers_bounded_by_the_network(pre, capsys):
    """g_transformer's default ``--encoder/decoder/cross-ctxlayers 2`` on a checkpoint of 2
    encoder and 1 decoder layers: the decoder's two are bounded by its 1 layer (said in one
    line) instead of refused; a value given that is deeper than the network is still refused."""
    from fairseq_docctx.errors import UsageError

    path = pre["ckpt"]["transformer"]
    seg = ["--context-size", "0", "--doc-mode", "segments"]
    args, _, model = build(pre["D"], "g_transformer", *seg, "--init-from-pretrained", path)
    assert (args.encoder_ctxlayers, args.decoder_ctxlayers, args.cross_ctxlayers) == (2, 1, 1)
    assert "g_transformer: --decoder-ctxlayers 1 (default 2), --cross-ctxlayers 1 (default 2): the default is " \
           "deeper than the network" in capsys.readouterr().out
    assert all(hasattr(layer.self_attn, "global_attn") for layer in model.encoder.layers)
    with pytest.raises(UsageError, match=r"^g_transformer: --cross-ctxlayers 3 must be between 0 and the "
                       r"decoder's 1 layers$"):
        build(pre["D"], "g_transformer", *seg, "--init-from-pretrained", path, "--cross-ctxlayers", "3")


def test_refusals(pre, tmp_path):
    """One line each: a flag that contradicts PATH (a flag equal to PATH's is accepted), an
    unknown model class, both initialisations, a dictionary the data folder's
    ``pretrained`` record does not match."""
    from fairseq_docctx.errors import UsageError

    path = pre["ckpt"]["transformer"]
    with pytest.raises(UsageError, match=r"^concat_transformer: --encoder-layers 3 contradicts .*: its "
                       r"--encoder-layers is 2$"):
        build(pre["D"], "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path,
              "--encoder-layers", "3")
    with pytest.raises(UsageError, match="--no-scale-embedding True contradicts .*: its --no-scale-embedding is False"):
        build(pre["D"], "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path,
              "--no-scale-embedding")
    # in fairseq-train: one line, exit 2, no traceback, nothing written
    p = run(["fairseq-train", pre["D"], "--user-dir", USER_DIR, "--task", "document_translation", "--arch",
             "han_transformer", *ARCHS["han_transformer"], "--init-from-pretrained", path, "--encoder-embed-dim", "64",
             *TRAIN, "--max-update", "1", "--save-dir", tmp_path / "refused"], check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.rstrip().splitlines()[-1] == (f"fairseq-train: error: han_transformer: --encoder-embed-dim 64 "
                                                  f"contradicts {path}: its --encoder-embed-dim is 32")
    assert not (tmp_path / "refused" / "checkpoint_last.pt").exists()
    args, _, _ = build(pre["D"], "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path,
                       "--encoder-layers", "2", "--dropout", "0.3")
    assert args.encoder_layers == 2 and args.dropout == 0.3
    with pytest.raises(UsageError, match="exclude each other"):
        build(pre["D"], "han_transformer", *ARCHS["han_transformer"], "--init-from-pretrained", path,
              "--init-from-sentence-checkpoint", path)

    # a checkpoint of another model class: a document model trained from the pretrained one
    other = tmp_path / "doc"
    run(["fairseq-train", pre["D"], "--user-dir", USER_DIR, "--task", "document_translation", "--arch",
         "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path, "--optimizer", "adam",
         "--lr", "1e-3", "--max-tokens", "500", "--max-update", "1", "--cpu", "--num-workers", "0", "--save-dir",
         other, "--no-epoch-checkpoints", "--disable-validation"])
    with pytest.raises(UsageError, match=r"model class concat_transformer \(--arch concat_transformer\) is not "
                       r"one this option starts from \(transformer, bart\)$"):
        build(pre["D"], "g_transformer", *ARCHS["g_transformer"], "--init-from-pretrained",
              other / "checkpoint_last.pt")

    # a transformer variant registered by another fairseq branch (NLLB's) reads as a transformer;
    # a model class this option does not know is refused
    state = torch.load(path, weights_only=False)
    state["cfg"]["model"].arch = "transformer_24_24"
    torch.save(state, tmp_path / "nllb_like.pt")
    args, _, _ = build(pre["D"], "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained",
                       tmp_path / "nllb_like.pt")
    assert args.encoder_layers == 2 and args.encoder_normalize_before
    state["cfg"]["model"].arch = "lstm"
    torch.save(state, tmp_path / "lstm.pt")
    with pytest.raises(UsageError, match=r"model class lstm \(--arch lstm\) is not one"):
        build(pre["D"], "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained",
              tmp_path / "lstm.pt")

    # shared embeddings need a joined dictionary
    run(["docctx-prepare", "-s", "src", "-t", "tgt", "--trainpref", pre["root"] / "raw" / "train",
         "--destdir", tmp_path / "separate", "--workers", "1"])
    with pytest.raises(UsageError, match="shares one embedding table .*: the data folder needs a joined dictionary"):
        build(tmp_path / "separate", "concat_transformer", "--context-size", "2", "--init-from-pretrained", path)

    # the contract's record of docctx-prepare --pretrained
    data = tmp_path / "D"
    shutil.copytree(pre["D"], data)
    manifest = json.loads((data / "docctx.json").read_text())
    rows = _weights(path)["encoder.embed_tokens.weight"].shape[0]

    def record(symbols):
        manifest["pretrained"] = {
            "family": "transformer", "dir": str(pre["P"]),
            "dictionary": {"src": "dict.src.txt", "tgt": "dict.tgt.txt"},
            "model_symbols": {"src": symbols, "tgt": symbols},
            "added_symbols": {"src": {"<sep>": symbols}, "tgt": {"<sep>": symbols}},
            "langtok": {"source": None, "target": None, "placement": None},
            "segmentation": None, "tokenizer": None}
        (data / "docctx.json").write_text(json.dumps(manifest))

    record(rows - 8)
    with pytest.raises(UsageError, match=f"the dictionary does not match the checkpoint: encoder.embed_tokens "
                       f"has {rows} rows, the data folder's docctx.json records model_symbols {rows - 8} for src"):
        build(data, "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path)
    record(rows)
    build(data, "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path)


def _cfg(ckpt):
    from fairseq import checkpoint_utils

    import fairseq_docctx  # noqa: F401  (the safe globals of checkpoint loading)

    return checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))["cfg"]["model"]


@pytest.mark.slow  # ~34 s of training and decoding: make test-all
def test_training_generation_and_resume(pre, tmp_path):
    """fairseq-train from the checkpoint: ``g_transformer --freeze-sentence-weights`` keeps
    every pretrained weight but the grown embedding table, trains the global attentions;
    ``concat_transformer --lr-scale-pretrained`` trains, and after the pretrained file is gone
    its run resumes (the network from the restored checkpoint, the weights not loaded again)
    and fairseq-generate translates every test sentence with it."""
    path = tmp_path / "pretrained.pt"
    shutil.copy(pre["ckpt"]["transformer"], path)
    ckpt = _weights(path)

    save = tmp_path / "g"
    p = run(["fairseq-train", pre["D"], "--user-dir", USER_DIR, "--task", "document_translation", "--arch",
             "g_transformer", *ARCHS["g_transformer"], "--doc-noise-mask", "0", "--init-from-pretrained", path,
             "--freeze-sentence-weights", *TRAIN, "--max-update", "4", "--save-dir", save])
    assert "g_transformer: initialised from" in p.stdout
    g = _weights(save / "checkpoint_last.pt")
    for k, v in ckpt.items():
        if k.endswith(("embed_tokens.weight", "output_projection.weight")):
            assert not torch.equal(g[k][: v.shape[0]], v), k  # grown: it learns (its new row must)
        else:
            assert torch.equal(g[k], v), k
    glob = "encoder.layers.1.self_attn.global_attn.q_proj.weight"
    assert not torch.equal(g[glob], ckpt["encoder.layers.1.self_attn.q_proj.weight"])
    cfg = _cfg(save / "checkpoint_last.pt")
    assert cfg.init_from_pretrained is None and cfg.initialized_from_pretrained == str(path)
    assert cfg.encoder_layers == 2 and cfg.encoder_normalize_before and cfg.activation_fn == "gelu"

    save = tmp_path / "concat"
    cmd = ["fairseq-train", pre["D"], "--user-dir", USER_DIR, "--task", "document_translation", "--arch",
           "concat_transformer", *ARCHS["concat_transformer"], "--init-from-pretrained", path,
           "--lr-scale-pretrained", "0.5", *TRAIN, "--save-dir", save]
    p = run(cmd + ["--max-update", "2"])
    assert "concat_transformer: initialised from" in p.stdout
    assert "parameters from --init-from-pretrained learn at 0.5 x the learning rate" in p.stdout
    path.unlink()
    p = run(cmd + ["--max-update", "4"])
    assert "resuming from" in p.stdout and "not applied again" in p.stdout
    assert "initialised from" not in p.stdout and "num_updates 4" in p.stdout + p.stderr
    p = run(["fairseq-generate", pre["D"], "--user-dir", USER_DIR, "--task", "document_translation", "--path",
             save / "checkpoint_last.pt", *ARCHS["concat_transformer"], "--gen-subset", "test", "--beam", "1",
             "--required-batch-size-multiple", "1", "--cpu", "--num-workers", "0"])
    hyps = [line for line in p.stdout.splitlines() if line.startswith("H-")]
    assert len(hyps) == sum(1 for _ in open(pre["root"] / "raw" / "test.src"))


#: the probe test's fine-tuning: updates and warmup (docs/pretrained.md: measured pronoun
#: accuracy per update count, from the sentence model and from scratch)
PROBE_UPDATES, PROBE_WARMUP = 125, 50


@pytest.mark.slow  # two concat_transformer trainings of PROBE_UPDATES updates: see docs/tests.md
def test_probe_learns_the_pronouns_sooner_from_the_sentence_model(probe, sentence_model, tmp_path):
    """The issue's probe test: the probe's sentence-level ``transformer`` (600 updates) as
    PATH, ``concat_transformer`` (K=2, both sides) for :data:`PROBE_UPDATES` updates gets the
    context-dependent pronouns right (>= 0.90) where the same model from scratch for the same
    updates does not."""
    import concurrent.futures

    import probe_utils as pu

    args = ["--context-size", "2", "--context-sides", "both", "--warmup-updates", str(PROBE_WARMUP)]

    def train(name, extra):
        return pu.train(probe["data_bin"], "concat_transformer", str(tmp_path / name), task="document_translation",
                        extra_args=args + extra, max_update=PROBE_UPDATES)["checkpoint"]

    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        pre = ex.submit(train, "pre", ["--init-from-pretrained", sentence_model["checkpoint"]])
        scratch = ex.submit(train, "scratch", [])
        ckpts = {"pretrained": pre.result(), "scratch": scratch.result()}
    acc = {name: pu.probe_accuracy(probe["data_bin"], ck, probe["annotations"], task="document_translation",
                                   extra_args=args[:4], phenomenon="anaphora")
           for name, ck in ckpts.items()}
    print(f"pronouns after {PROBE_UPDATES} updates: {acc}")
    assert acc["pretrained"] >= 0.90 > acc["scratch"]
