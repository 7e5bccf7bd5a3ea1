"""Session fixtures of the context probe, shared by every test file that needs them: the
probe data and the tiny models trained on it once per session (600 updates each).

Loaded by conftest.py (``pytest_plugins``); a model is only trained when a collected test
asks for it.
"""
import pytest

import probe_utils as pu

K = ["--context-size", "2"]


@pytest.fixture(scope="session")
def probe(tmp_path_factory):
    return pu.make_probe_data(str(tmp_path_factory.mktemp("probe")))


def _train(probe, tmp_path_factory, name, arch, extra):
    work = str(tmp_path_factory.mktemp(name))
    return pu.train(probe["data_bin"], arch, work, task="document_translation", extra_args=extra)


@pytest.fixture(scope="session")
def sentence_model(probe, tmp_path_factory):
    return _train(probe, tmp_path_factory, "sent", "transformer", ["--context-size", "0"])


@pytest.fixture(scope="session")
def concat_model(probe, tmp_path_factory):
    return _train(probe, tmp_path_factory, "concat", "concat_transformer", K + ["--context-sides", "both"])


@pytest.fixture(scope="session")
def qcn_model(probe, tmp_path_factory):
    return _train(probe, tmp_path_factory, "qcn", "qcn_transformer", K + [
        "--qcn-context-size", "2", "--num-capsules", "4", "--routing-iters", "3",
        "--criterion", "label_smoothed_cross_entropy_pcc"])


def accuracy(probe, model, *extra):
    return pu.probe_accuracy(probe["data_bin"], model["checkpoint"], probe["annotations"],
                             task="document_translation", extra_args=list(extra))


@pytest.fixture(scope="session")
def sentence_acc(probe, sentence_model):
    res = accuracy(probe, sentence_model, "--context-size", "0")
    print("transformer:", res["by_phenomenon"])
    return res


def han_args(config):
    """fairseq-train arguments of one HAN configuration (``tests/test_han.py``), and the task
    arguments to decode it with. K=3 (the paper's; the probe only needs 2) costs nothing
    measurable here: 600 updates take ~100 s on an idle machine, like concat/qcn."""
    from test_han import han_probe_args

    args = han_probe_args(config)
    return args, args[2:6]  # --context-size 3 --context-sides source|both


@pytest.fixture(scope="session")
def han_encoder_model(probe, tmp_path_factory):
    """HAN encoder (``--han-encoder True --han-decoder none``): source context only."""
    train_args, task_args = han_args("encoder")
    return dict(_train(probe, tmp_path_factory, "han_enc", "han_transformer", train_args), task_args=task_args)


@pytest.fixture(scope="session")
def han_decoder_model(probe, tmp_path_factory):
    """HAN decoder (``--han-encoder False --han-decoder target``): decoder states of the
    previous target sentences, decoded in document order with its own translations as
    context (``--target-context hypothesis``, the task's default)."""
    train_args, task_args = han_args("decoder")
    return dict(_train(probe, tmp_path_factory, "han_dec", "han_transformer", train_args), task_args=task_args)


@pytest.fixture(scope="session")
def mht_model(probe, sentence_model, tmp_path_factory):
    """mht_transformer (paper defaults at the probe's tiny size: both sides, multi-hop, K=2):
    drafts of the train and test splits by the sentence-level model (greedy), the source-side
    sentence encoder initialised from its encoder."""
    from fairseq_docctx.data.drafts import make_drafts

    make_drafts(probe["data_bin"], sentence_model["checkpoint"], splits=("train", "test"), beam=1,
                max_tokens=4000, cpu=True)
    return _train(probe, tmp_path_factory, "mht", "mht_transformer", K + [
        "--context-sides", "src,draft", "--src-sentence-encoder-from", sentence_model["checkpoint"]])
