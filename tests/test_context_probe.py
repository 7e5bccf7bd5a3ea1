"""The context probe: do document-level models really use their context?

Synthetic documents where a pronoun's target form depends on the class of a noun one or
two sentences back (and a word must repeat a form chosen earlier in the document). Tiny
models train for real on CPU (600 updates each, one shared training per model); the
sentence-level `transformer` must stay near chance while every context model gets the
context-dependent words right far more often.
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


def test_sentence_model_is_at_chance_on_pronouns(sentence_acc):
    assert 0.3 < sentence_acc["by_phenomenon"]["anaphora"]["accuracy"] < 0.7


def test_concat_transformer_uses_context(probe, concat_model, sentence_acc):
    res = accuracy(probe, concat_model, *K, "--context-sides", "both")
    ana, base = res["by_phenomenon"]["anaphora"]["accuracy"], sentence_acc["by_phenomenon"]["anaphora"]["accuracy"]
    print(f"pronouns: concat_transformer {ana:.3f} vs transformer {base:.3f}")
    assert ana >= base + 0.3 and ana >= 0.85


def test_own_translations_as_context_match_reference_context(probe, concat_model):
    """Document-order decoding with the model's own previous translations reaches the
    accuracy it reaches with the references as context (within a few points)."""
    hyp = accuracy(probe, concat_model, *K, "--context-sides", "both")
    ref = accuracy(probe, concat_model, *K, "--context-sides", "both", "--target-context", "reference")
    for ph in ("anaphora", "consistency"):
        h, r = hyp["by_phenomenon"][ph]["accuracy"], ref["by_phenomenon"][ph]["accuracy"]
        print(f"{ph}: own translations {h:.3f}, references {r:.3f}")
        assert h >= r - 0.05


def test_qcn_transformer_uses_context(probe, qcn_model, sentence_acc):
    res = accuracy(probe, qcn_model, *K)
    ana, base = res["by_phenomenon"]["anaphora"]["accuracy"], sentence_acc["by_phenomenon"]["anaphora"]["accuracy"]
    print(f"pronouns: qcn_transformer {ana:.3f} vs transformer {base:.3f}")
    assert ana >= base + 0.2
