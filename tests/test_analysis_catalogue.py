"""The analyses of the context a model offers (``docctx-score plot``'s panels, ``docctx-score
entropy``'s attention) are asked of the model: its ``analyses`` declaration in the
document-context contract (fairseq_docctx.models.document_context). Every architecture answers
for itself, and the commands refuse a model that does not declare an analysis with one line
naming the models that offer it."""
import pytest
import torch

from conftest import REPO, TINY_MODEL, run, run_in_process

import fairseq_docctx.models  # noqa: F401  (registers every architecture)
from fairseq_docctx.models import document_context as dc

PANELS = ["concat_transformer", "han_transformer", "hrnn_context", "isg_rnnsearch", "mht_transformer",
          "qcn_transformer"]
ATTENTION = ["concat_transformer", "han_transformer", "isg_rnnsearch", "mht_transformer", "qcn_transformer"]


def test_every_architecture_answers_what_it_offers():
    from fairseq.models import MODEL_REGISTRY

    assert dc.models_offering("panels") == PANELS
    assert dc.models_offering("attention") == ATTENTION
    for name, cls in MODEL_REGISTRY.items():
        if not (isinstance(cls, type) and issubclass(cls, dc.DocumentContextModel)):
            continue
        for analysis, (method, _) in dc.ANALYSES.items():
            implemented = getattr(cls, method) is not getattr(dc.DocumentContextModel, method)
            # a declaration without the method, or a method without the declaration, breaks the contract
            assert (analysis in cls.analyses) == implemented, (name, analysis)


def test_a_model_without_the_declaration_is_refused_with_one_line():
    class Undeclared(dc.DocumentContextModel):
        def context_weights(self, sample):  # the method alone offers nothing
            return []

    for analysis, call, offering in (("panels", dc.context_weights, PANELS),
                                     ("attention", dc.context_attention, ATTENTION)):
        assert not dc.offers(Undeclared(), analysis)
        with pytest.raises(dc.ContextAnalysisUnsupported) as e:
            call(Undeclared(), {})
        message = str(e.value)
        assert "\n" not in message and "Undeclared does not give" in message
        assert message.endswith(", ".join(offering))
    with pytest.raises(dc.ContextAnalysisUnsupported, match="sentence-level"):
        dc.context_weights(torch.nn.Linear(1, 1), {})


@pytest.fixture(scope="module")
def sentence_ckpt(toy_bin, tmp_path_factory):
    """A sentence-level transformer after one update: it declares no analysis."""
    save = tmp_path_factory.mktemp("sentence_level")
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--context-size", "0", "--arch", "transformer", *TINY_MODEL, "--max-tokens", "600", "--max-update", "1",
         "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.mark.parametrize("command, offering", [("plot", PANELS), ("entropy", ATTENTION)])
def test_the_commands_refuse_a_model_without_the_analysis(toy_bin, sentence_ckpt, tmp_path, capsys, command,
                                                           offering):
    from fairseq_docctx.cli.score import cli_main

    argv = [command, "--path", sentence_ckpt, "--data", toy_bin]
    argv += ["--doc", "0", "--sentence", "1", "--outdir", tmp_path] if command == "plot" else ["--max-sentences", "3"]
    code, _, err = run_in_process(cli_main, argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"docctx-score {command}: error: TransformerModel is a sentence-level model")
    assert lines[0].endswith(", ".join(offering))  # every architecture that offers it, asked of the models
    assert not list(tmp_path.iterdir())  # refused before any work
