"""The round trip fairseq -> transformers -> fairseq: a tiny trained model of each option set
``docctx-export transformers`` writes as a class the import reads (FSMT: post-norm, sinusoidal,
shared or two vocabularies; M2M-100: pre-norm, sinusoidal, a ``concat_transformer`` with both
context sides; mBART: pre-norm, learned positions, ``--layernorm-embedding``; BART: post-norm,
learned positions, ``--layernorm-embedding``; tests/hf_export_fixtures.py's session models)
exported, then taken up as a user who has only the export would: ``docctx-prepare --pretrained
OUTDIR`` on the raw documents (the export read as the fairseq release it is: the checkpoint's
dictionaries, its segmentation) and ``fairseq-train --init-from-pretrained OUTDIR --lr 0
--max-update 1`` (fairseq-train's own ``main``, in this process). The data is the checkpoint's
(the same batches), the model's logits are the checkpoint's (atol 1e-4; the largest difference
is printed), its parameters have the checkpoint's names, shapes and ties (no output bias, no
untied copy), and its own export is the first export again. With the checkpoint's own data
folder the dictionaries are checked against the export's; what does not round-trip is one line.
"""
import json
import shutil

import pytest
import torch

from conftest import REPO, run_in_process
from hf_export_fixtures import MODELS, export_folder

pytest.importorskip("transformers")

ATOL = 1e-4
USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]
#: the exported models taken up again (hf_export_fixtures.MODELS) -> the context options of the
#: document model started from the export (the checkpoint's own)
ROUND_TRIP = {
    "sentence": ["--context-size", "0"],
    "separate": ["--context-size", "0"],
    "prenorm_concat": ["--context-size", "1", "--context-sides", "both"],
    "mbart_like": ["--context-size", "0"],
    "bart_like": ["--context-size", "0"],
}


def fairseq_train(argv):
    """fairseq-train in this process (what its console script runs, on ``argv``)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli.train import main

    args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])
    main(convert_namespace_to_omegaconf(args))


def start_from(folder, data, save, context, capsys):
    """``fairseq-train DATA --init-from-pretrained FOLDER`` for one update at learning rate 0 (a
    checkpoint holding the folder's network and weights); the checkpoint and the lines printed."""
    capsys.readouterr()
    fairseq_train([data, *USER_DIR, "--task", "document_translation", "--arch", "concat_transformer", *context,
                   "--init-from-pretrained", folder, "--optimizer", "adam", "--lr", "0", "--max-update", "1",
                   "--max-tokens", "1000", "--cpu", "--num-workers", "0", "--seed", "1", "--no-epoch-checkpoints",
                   "--no-save-optimizer-state", "--disable-validation", "--save-dir", save])
    return save / "checkpoint_last.pt", capsys.readouterr().out


def _hub(ckpt, data):
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(str(ckpt), data=str(data), target_context="reference")
    hub.models[0].eval()
    return hub


def _test_batch(hub, n=12):
    task = hub.task
    task.load_dataset("test")
    ds = task.dataset("test")
    return ds.collater([ds[i] for i in range(n)])


def _logits(hub, sample):
    with torch.no_grad():
        return hub.models[0](**sample["net_input"])[0]


def _same_batches(a, b):
    """The two samples' network inputs (tokens, lengths, context tables) are equal."""
    assert a["net_input"].keys() == b["net_input"].keys()
    for k, v in a["net_input"].items():
        if torch.is_tensor(v):
            assert torch.equal(v, b["net_input"][k]), k
        elif isinstance(v, dict):
            assert v.keys() == b["net_input"][k].keys(), k
            for kk, vv in v.items():
                assert not torch.is_tensor(vv) or torch.equal(vv, b["net_input"][k][kk]), (k, kk)


def _parameters(model):
    """``{name: shape}`` of the parameters, each tensor once (a tied one under its first name)."""
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def _symbols(data, lang):
    return [line.split()[0] for line in (data / f"dict.{lang}.txt").read_text().splitlines()]


def _max_diff(a, b):
    diff = float((a - b).abs().max())
    assert a.std() > 0.1, "the logits do not vary"
    assert diff < ATOL, diff
    return diff


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_an_export_taken_up_again_is_the_checkpoint(trained, toy_bin, tmp_path, capsys, name):
    from safetensors.torch import load_file

    from fairseq_docctx.cli.prepare import main as prepare_main

    ckpt, data, folder = trained(name)
    new_data = tmp_path / "bin"
    raw = toy_bin.parent / "raw"
    prepare_main(["-s", "src", "-t", "tgt", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                  "--testpref", str(raw / "test"), "--destdir", str(new_data), "--pretrained", str(folder),
                  "--workers", "1"])
    record = json.loads((new_data / "docctx.json").read_text())["pretrained"]
    assert (record["family"], record["segmentation"]["kind"], record["added_symbols"]) == (
        "transformer", "none", {"src": {}, "tgt": {}})
    for lang in ("src", "tgt"):  # the checkpoint's dictionaries, symbol for symbol
        assert _symbols(new_data, lang) == _symbols(data, lang)

    again, printed = start_from(folder, new_data, tmp_path / "ckpt", ROUND_TRIP[name], capsys)
    assert "a docctx-exported transformers " in printed
    assert "0 grown, 0 new, 0 left out" in printed, printed

    before, after = _hub(ckpt, data), _hub(again, new_data)
    sample = _test_batch(before)
    _same_batches(sample, _test_batch(after))
    if name == "prenorm_concat":
        assert sample["net_input"]["context"]["tgt_tokens"].numel() > 0, "no context in the batch"
    diff = _max_diff(_logits(before, sample), _logits(after, sample))
    print(f"{name} ({MODELS[name][3]}): max |logits difference| {diff:.1e}")
    assert _parameters(after.models[0]) == _parameters(before.models[0])

    # its own export is the first one: the same configuration (the docctx entry aside) and weights
    second = export_folder(again, new_data, tmp_path / "hf")
    first_cfg, second_cfg = (json.loads((f / "config.json").read_text()) for f in (folder, second))
    ctx1, ctx2 = first_cfg.pop("docctx")["context"], second_cfg.pop("docctx")["context"]
    # a concat_transformer at K=0 records its default sides beside size 0: only K and the separator compare
    keys = ctx1 if ctx1["size"] else ("size", "separator", "separator_id")
    assert {k: ctx1[k] for k in keys} == {k: ctx2[k] for k in keys}
    assert first_cfg == second_cfg
    w1, w2 = load_file(str(folder / "model.safetensors")), load_file(str(second / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)


def test_the_checkpoints_own_data_is_checked_against_the_export(trained, capsys, tmp_path):
    """The checkpoint's own data folder (prepared without --pretrained): its dictionaries are
    checked against the export's, symbol for symbol (no warning), and the model gives the
    checkpoint's logits; another dictionary is refused in one line naming the first symbol
    that differs."""
    from fairseq_docctx.errors import UsageError

    ckpt, data, folder = trained("sentence")
    again, printed = start_from(folder, data, tmp_path / "ckpt", ["--context-size", "0"], capsys)
    assert "encoder dictionary (src): the export's" in printed and "checked" in printed
    assert "warning" not in printed
    before, after = _hub(ckpt, data), _hub(again, data)
    sample = _test_batch(before)
    print(f"the checkpoint's data: max |logits difference| {_max_diff(_logits(before, sample), _logits(after, sample)):.1e}")

    other = tmp_path / "other"  # the checkpoint's data with two symbols of the dictionaries swapped: other ids
    shutil.copytree(data, other)
    for lang in ("src", "tgt"):
        lines = (other / f"dict.{lang}.txt").read_text().splitlines()
        lines[3], lines[4] = lines[4], lines[3]
        (other / f"dict.{lang}.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=r"the dictionary is not the export's: dict\.src\.txt has '\S+' at index 7, "
                                         r"the export '\S+' \(prepare the data with docctx-prepare --pretrained"):
        start_from(folder, other, tmp_path / "refused", ["--context-size", "0"], capsys)


def test_what_does_not_round_trip_is_one_line(trained, toy_bin, tmp_path, capsys):
    """An export of data with language tokens (its release gives them: prepare from it) and a
    BART folder that is not an export: one line each."""
    from fairseq_docctx.cli.prepare import cli_main as prepare_cli
    from fairseq_docctx.data.hf_folder import HFFolderError
    from fairseq_docctx.models import hf_import

    _, _, folder = trained("sentence")
    tagged = tmp_path / "tagged"
    shutil.copytree(folder, tagged)
    cfg = json.loads((tagged / "config.json").read_text())
    cfg["docctx"]["language_tokens"] = {"source": "__en__", "target": "__de__", "source_id": 5, "target_id": 6}
    cfg["docctx"]["pretrained"] = {"dir": "/releases/m2m100"}
    (tagged / "config.json").write_text(json.dumps(cfg))
    raw = toy_bin.parent / "raw"
    code, _, err = run_in_process(prepare_cli, ["-s", "src", "-t", "tgt", "--trainpref", raw / "train", "--destdir",
                                                tmp_path / "bin", "--pretrained", tagged], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "language tokens (__en__, __de__)" in lines[0], err
    assert "--pretrained /releases/m2m100" in lines[0] and not (tmp_path / "bin").exists()

    _, _, bart = trained("bart_like")
    plain = tmp_path / "plain-bart"
    shutil.copytree(bart, plain)
    cfg = json.loads((plain / "config.json").read_text())
    del cfg["docctx"]
    (plain / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFFolderError, match="model_type 'bart' without the docctx entry"):
        hf_import.read_folder(str(plain))
