"""CoWord dropout (Fernandes et al. 2021, §3; ``--coword-dropout P``): in training, each word of
the current source sentence becomes the mask symbol with probability P; the context, the target
and the decoder input are untouched, validation and inference see the sentence as it is. The
mask is a symbol of the data's dictionaries (``docctx-prepare --mask-symbol``), never ``<unk>``."""
import json

import pytest
import torch

from conftest import REPO, write_toy_documents

USER_DIR = str(REPO / "fairseq_docctx")
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings"]


@pytest.fixture(scope="module")
def masked_bin(tmp_path_factory):
    """Toy documents prepared with ``--mask-symbol <mask>`` (joined dictionary)."""
    from benchmarks.toy import prepare_command
    from fairseq_docctx.cli.prepare import main

    root = tmp_path_factory.mktemp("coword")
    raw = write_toy_documents(root / "raw", docs=(200, 8, 8))
    argv = [str(a) for a in prepare_command(raw, root / "bin")[1:]] + ["--mask-symbol", "<mask>"]
    main(argv)
    return root / "bin"


def _setup(data, *extra, arch="concat_transformer"):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", USER_DIR, "--task", "document_translation",
                                                "--arch", arch, *TINY, *map(str, extra)])
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return args, task, task.build_model(args)


def test_the_mask_symbol_is_in_the_dictionaries(masked_bin, toy_bin):
    from fairseq.data import Dictionary

    manifest = json.loads((masked_bin / "docctx.json").read_text())
    for lang in ("src", "tgt"):
        d = Dictionary.load(str(masked_bin / f"dict.{lang}.txt"))
        assert d.index("<sep>") == 4 and d.index("<mask>") == 5
        assert manifest["mask_symbol"] == "<mask>" and manifest["mask_symbol_index"][lang] == 5
        plain = Dictionary.load(str(toy_bin / f"dict.{lang}.txt"))  # without --mask-symbol: as before
        assert "<mask>" not in plain.indices and plain.index("<sep>") == 4
    assert "mask_symbol" not in json.loads((toy_bin / "docctx.json").read_text())


def test_the_mask_in_the_text_is_refused(tmp_path, capsys):
    from fairseq_docctx.cli.prepare import cli_main

    raw = write_toy_documents(tmp_path / "raw", docs=(4, 2, 2))
    lines = (raw / "train.src").read_text().splitlines()
    lines[2] = lines[2] + " <mask>"
    (raw / "train.src").write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as e:
        cli_main(["-s", "src", "-t", "tgt", "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "bin"),
                  "--joined-dictionary", "--mask-symbol", "<mask>"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"{raw / 'train.src'}:3" in err and "the mask symbol '<mask>' occurs in the text" in err
    assert not (tmp_path / "bin").exists()


class _Backward:
    def backward(self, loss):
        loss.backward()


def _seen(model):
    """The ``net_input`` of every forward call of ``model``, kept in a list."""
    seen, forward = [], model.forward

    def spy(src_tokens, src_lengths, prev_output_tokens, **kw):
        seen.append(dict(src_tokens=src_tokens, src_lengths=src_lengths, prev_output_tokens=prev_output_tokens, **kw))
        return forward(src_tokens, src_lengths, prev_output_tokens, **kw)

    model.forward = spy
    return seen


def test_masks_only_current_source_words_in_training_at_the_rate(masked_bin):
    p = 0.3
    args, task, model = _setup(masked_bin, "--context-size", "2", "--context-sides", "both", "--coword-dropout", p)
    criterion = task.build_criterion(args)
    task.load_dataset("train")
    ds = task.dataset("train")
    sample = ds.collater([ds[i] for i in range(len(ds))])
    seen = _seen(model)
    task.train_step(sample, model, criterion, _Backward(), 0)
    got, orig = seen[-1], sample["net_input"]
    mask, sep = task.src_dict.index("<mask>"), task.src_dict.index("<sep>")
    changed = got["src_tokens"].ne(orig["src_tokens"])
    words = orig["src_tokens"].ge(task.src_dict.nspecial) & orig["src_tokens"].ne(sep)
    assert bool(got["src_tokens"][changed].eq(mask).all()) and not bool((changed & ~words).any())
    n, k = int(words.sum()), int(changed.sum())
    sd = (n * p * (1 - p)) ** 0.5
    assert n > 2000 and abs(k - n * p) < 4 * sd, (k, n)  # the asked rate, counted
    # the context (the tables hold their own copy of every sentence), the target, the decoder input
    ctx, ctx0 = got["context"], orig["context"]
    assert ctx.keys() == ctx0.keys()
    assert all(torch.equal(ctx[key], ctx0[key]) for key in ctx if torch.is_tensor(ctx[key]))
    assert torch.equal(got["prev_output_tokens"], orig["prev_output_tokens"])
    assert got["src_tokens"].eq(task.src_dict.eos()).sum() == orig["src_tokens"].eq(task.src_dict.eos()).sum()
    # validation sees the sentences as they are
    task.valid_step(sample, model, criterion)
    assert torch.equal(seen[-1]["src_tokens"], orig["src_tokens"])


def test_off_by_default_and_refusals(masked_bin, toy_bin):
    from fairseq_docctx.errors import UsageError

    _, task, model = _setup(masked_bin, "--context-size", "1")
    sample = {"net_input": {"src_tokens": torch.tensor([[5, 6, 7, 2]])}}
    state = torch.get_rng_state()
    assert task.coword_dropout(sample, model) is sample and torch.equal(torch.get_rng_state(), state)
    with pytest.raises(UsageError, match=r"source dictionary has no <mask> \(the mask\): prepare the data with "
                                         r"docctx-prepare --mask-symbol <mask>$"):
        _setup(toy_bin, "--context-size", "1", "--coword-dropout", "0.1")
    with pytest.raises(UsageError, match="translates segments"):
        _setup(masked_bin, "--doc-mode", "segments", "--coword-dropout", "0.1", "--encoder-ctxlayers", "1",
               "--decoder-ctxlayers", "1", "--cross-ctxlayers", "1", arch="g_transformer")
    for p in ("1", "-1", "nan", "inf"):  # -1 and NaN trained as if off
        with pytest.raises(UsageError, match=rf"^--coword-dropout {p}: a probability below 1 and at least 0 \(0: off\)$"):
            _setup(masked_bin, "--context-size", "1", "--coword-dropout", p)
