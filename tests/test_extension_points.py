"""Extension points: what adding a piece touches, done the way docs/architecture.md says,
and run through the commands (``docctx-prepare``, ``docctx-translate``, ``docctx-score``;
in-process, each command's main called with its arguments).

a toy document format
    ``tests/toy_tab_format.py`` (one module: lines ``DOCID<TAB>sentence``), registered with
    ``formats.register`` only, prepares the same data as the docids files, is detected,
    translated and written back in its format, and scored as the docids files are.

a toy context side
    One module of the test's own (written below, imported at test time) declares a context
    side ``toyrev`` — each sentence's source reversed — with its ``load`` hook (a binarized
    split's sentences) and its raw-input hook (those of raw input), and a model reading it;
    nothing in the package is edited. The side goes through ``docctx-prepare`` (the toy data),
    ``fairseq-train``, ``docctx-translate`` and ``docctx-score`` (in-process, where the
    module is imported), and the task's ``build_dataset_for_inference`` gives the batches
    the hub gives.
"""
import importlib
import json
import sys
import textwrap

import pytest
import torch

from conftest import TINY_MODEL, run, run_in_process
from fairseq_docctx.cli.prepare import main as prepare_main
from fairseq_docctx.cli.score import build_parser as score_parser
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.data import formats
from fairseq_docctx.data.readers import read_file, read_parallel

# ------------------------------------------------------------------------------------------
# a toy document format (tests/toy_tab_format.py: one module, registered here)


@pytest.fixture(scope="module")
def toy_tab_format():
    from toy_tab_format import TabFormat

    formats.register(TabFormat())
    yield "toy-tab"
    formats.unregister("toy-tab")


def _write_tab(path, docs):
    path.write_text("".join(f"{doc_id}\t{s}\n" for doc_id, sentences in docs for s in sentences))
    return path


@pytest.fixture(scope="module")
def toy_tab_raw(toy_bin, toy_tab_format, tmp_path_factory):
    """The toy documents of ``toy_bin`` (docids format) written again in the toy format:
    ``{split}.{src,tgt}``."""
    out = tmp_path_factory.mktemp("toy_tab")
    for split in ("train", "valid", "test"):
        pd = read_parallel(str(toy_bin.parent / "raw" / split), "src", "tgt")
        for lang, docs in (("src", pd.src), ("tgt", pd.tgt)):
            _write_tab(out / f"{split}.{lang}", [(d.doc_id, d.sentences) for d in docs])
    return out


def test_a_toy_format_prepares_the_same_data(toy_bin, toy_tab_raw, tmp_path):
    dest = tmp_path / "bin"
    prepare_main(["-s", "src", "-t", "tgt", "--trainpref", str(toy_tab_raw / "train"),
                  "--validpref", str(toy_tab_raw / "valid"), "--testpref", str(toy_tab_raw / "test"),
                  "--destdir", str(dest), "--joined-dictionary", "--workers", "1", "--input-format", "toy-tab"])
    inputs = json.loads((dest / "docctx.json").read_text())["splits"]["train"]["inputs"]
    assert [i["format"] for i in inputs] == ["toy-tab"]
    for name in sorted(p.name for p in toy_bin.iterdir()):
        if name.endswith((".bin", ".idx", ".txt", ".docs")):
            assert (dest / name).read_bytes() == (toy_bin / name).read_bytes(), name


def _score(argv, capsys):
    args = score_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    capsys.readouterr()
    return rc


def test_a_toy_format_is_translated_and_scored_in_its_format(toy_bin, concat_both_ckpt, toy_tab_raw, tmp_path,
                                                              capsys):
    raw = toy_bin.parent / "raw"
    common = ["--path", concat_both_ckpt, "--data", toy_bin, "--beam", "2", "--cpu", "--quiet"]
    # the toy format detected, and written back in it; the same translations as from docids
    rc, _, err = run_in_process(translate_main, [toy_tab_raw / "test.src", *common, "-o", tmp_path / "hyp.tab"],
                                capsys)
    assert rc == 0, err
    rc, _, err = run_in_process(translate_main, [raw / "test.src", "--docids", raw / "test.docids", *common,
                                                 "-o", tmp_path / "hyp.txt"], capsys)
    assert rc == 0, err
    hyp, fmt = read_file(str(tmp_path / "hyp.tab"))
    src, _ = read_file(str(toy_tab_raw / "test.src"))
    assert fmt == "toy-tab" and [d.doc_id for d in hyp] == [d.doc_id for d in src]
    assert [s for d in hyp for s in d.sentences] == (tmp_path / "hyp.txt").read_text().splitlines()
    # scored with toy-format hypotheses and references: the scores of the docids files
    rc = _score(["bleu", "--hyp", tmp_path / "hyp.tab", "--hyp-format", "toy-tab", "--ref", toy_tab_raw / "test.tgt",
                 "--both", "--json", tmp_path / "tab.json"], capsys)
    assert rc == 0
    rc = _score(["bleu", "--hyp", tmp_path / "hyp.txt", "--ref", raw / "test.tgt", "--docids", raw / "test.docids",
                 "--both", "--json", tmp_path / "txt.json"], capsys)
    assert rc == 0
    tab, txt = (json.loads((tmp_path / f"{n}.json").read_text())["metrics"] for n in ("tab", "txt"))
    assert tab == txt and tab


# ---------------------------------------------------------------- a toy context side
TOY_SIDE_MODULE = '''
"""The toy context side ``toyrev``: the source sentence reversed (its </s> last), and a HAN
model that reads it beside the source context (and checks, at every forward pass with
context, that the side's table holds the reversed source sentences)."""
import torch
from fairseq.models import register_model, register_model_architecture

import fairseq_docctx  # noqa: F401  (the plugin: task, models, sides)
from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.models.han_transformer import HANTransformerModel, han_transformer

SIDE = "toyrev"
#: the number of sentences the raw-input hook's makers were asked for, call by call
RAW_CALLS = []


class Reversed:
    """The side's sentences: an indexable of token tensors with ``sizes``."""

    def __init__(self, sentences):
        self.items = [torch.cat([s[:-1].flip(0), s[-1:]]).long() for s in sentences]
        self.sizes = torch.tensor([len(s) for s in self.items]).numpy()

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def load(task, split, data_path, pair):
    return Reversed([pair.src[i] for i in range(len(pair))])


def raw_input(request):
    def make(sentences, batch_size=None, max_tokens=None):
        RAW_CALLS.append(len(sentences))
        return Reversed([sentences[i] for i in range(len(sentences))])
    return make


cb.register_side(cb.ContextSide(SIDE, "source", left_pad=False, load=load))
cb.register_raw_input(SIDE, raw_input)


@register_model("toyrev_han")
class ToyRevHAN(HANTransformerModel):
    @classmethod
    def build_model(cls, args, task):
        model = super().build_model(args, task)
        model.declare_context(tuple(model.context_sides) + (SIDE,), model.context_size)
        return model

    def forward(self, src_tokens, src_lengths, prev_output_tokens, context=None, **kwargs):
        if context is not None:
            t = cb.table(context, SIDE)
            pad = self.encoder.dictionary.pad()
            for b in range(src_tokens.size(0)):
                row, src = t.tokens[t.self_rows[b]], src_tokens[b]
                assert row[row.ne(pad)].tolist() == torch.cat([src[src.ne(pad)][:-1].flip(0), src[-1:]]).tolist()
        return super().forward(src_tokens, src_lengths, prev_output_tokens, context=context, **kwargs)


@register_model_architecture("toyrev_han", "toyrev_han")
def toyrev_han(args):
    han_transformer(args)
'''


@pytest.fixture(scope="module")
def toy_side(toy_bin, tmp_path_factory):
    """The toy side's module (a ``--user-dir`` package), imported here, and a model reading
    the side trained on the toy data (prepared by ``docctx-prepare``)."""
    root = tmp_path_factory.mktemp("toy_side")
    pkg = root / "toyrev"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(TOY_SIDE_MODULE))
    sys.path.insert(0, str(root))
    module = importlib.import_module("toyrev")
    save = root / "ckpt"
    run(["fairseq-train", toy_bin, "--user-dir", pkg, "--task", "document_translation", "--context-size", "1",
         "--context-sides", "src,toyrev", "--arch", "toyrev_han", "--han-decoder", "none", *TINY_MODEL, "--max-tokens", "600",
         "--max-epoch", "1", "--no-epoch-checkpoints", "--save-dir", save])
    return module, save / "checkpoint_last.pt"


def test_a_toy_side_with_raw_input_runs_through_translate_and_score(toy_side, toy_bin, tmp_path, capsys):
    from fairseq_docctx.cli.score import cli_main as score_main
    from fairseq_docctx.cli.translate import cli_main as translate_main

    module, ckpt = toy_side
    src = tmp_path / "in.txt"
    src.write_text("w1 w2 w3\nw4 w5\n\nw6 w7 w8 w9\n")
    del module.RAW_CALLS[:]
    code, _, err = run_in_process(translate_main, [src, "--input-format", "blank", "--path", ckpt, "--data", toy_bin,
                                                   "--beam", 2, "--quiet", "--cpu", "-o", tmp_path / "out.txt"], capsys)
    assert code == 0, err
    assert len((tmp_path / "out.txt").read_text().split("\n\n")) == 2
    assert module.RAW_CALLS == [3]  # the raw input's three sentences, through the side's hook
    del module.RAW_CALLS[:]
    code, out, err = run_in_process(score_main, ["cxmi", "--path", ckpt, "--data", toy_bin], capsys)
    assert code == 0, err
    assert module.RAW_CALLS and "cxmi" in (out + err).lower()


def test_build_dataset_for_inference_gives_the_hubs_batches(toy_side, toy_bin):
    from fairseq_docctx.data.doc_index import DocIndex
    from fairseq_docctx.data.packed_tokens import PackedTokens
    from fairseq_docctx.hub import from_pretrained

    _, ckpt = toy_side
    hub = from_pretrained(str(ckpt), data=str(toy_bin))
    docs = [["w1 w2 w3", "w4 w5"], ["w6 w7 w8 w9"], ["w2", "w3 w4", "w5 w6 w7"]]
    flat = PackedTokens.join([PackedTokens(hub.encode(s) for s in d) for d in docs])
    index = DocIndex([str(i) for i in range(len(docs))], [len(d) for d in docs])
    from fairseq.data import LanguagePairDataset

    ours = hub.task.build_dataset_for_inference([flat[i] for i in range(len(flat))], flat.sizes,
                                                documents=index, side_data=hub.side_data(flat))
    theirs = hub.documents_dataset(flat, index)
    assert ours.position_major == theirs.position_major and ours.sides == theirs.sides == ("src", "toyrev")

    def batches(ds):
        itr = hub.task.get_batch_iterator(dataset=ds, max_sentences=2, disable_iterator_cache=True)
        return list(itr.next_epoch_itr(shuffle=False))

    a, b = batches(ours), batches(theirs)
    assert len(a) == len(b) > 1
    for x, y in zip(a, b):
        assert torch.equal(x["id"], y["id"])
        assert torch.equal(x["net_input"]["src_tokens"], y["net_input"]["src_tokens"])
        cx, cy = x["net_input"]["context"], y["net_input"]["context"]
        assert cx.keys() == cy.keys() and all(torch.equal(cx[k], cy[k]) for k in cx if torch.is_tensor(cx[k]))
    # without documents: fairseq's own dataset, as its hub's translate reads it
    plain = hub.task.build_dataset_for_inference([flat[0]], flat.sizes[:1])
    assert type(plain) is LanguagePairDataset
