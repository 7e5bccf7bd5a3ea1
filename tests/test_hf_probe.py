"""The transformers round trip on the context probe (docs/probe.md): the probe's sentence-level
``transformer`` (the session's ``sentence_model``) saved by ``docctx-export transformers`` as a
transformers folder, then a ``concat_transformer`` (K=2, both sides, the concatenation probe
test's training) started from that folder by ``fairseq-train --init-from-pretrained FOLDER``
on the probe's data (``hf_concat_model`` in tests/probe_fixtures.py, trained in the
background with the other probe models). It starts from the folder's weights and learns to
read its context: the words that need it right, and CXMI (true context against a random one)
above the concatenation probe test's margin."""
import json
import os

import pytest

import probe_utils as pu
from probe_fixtures import K, accuracy
from test_context_probe import MARGIN, reads_content

#: the accuracy on the context-dependent pronouns the model started from the folder reaches
PRONOUNS = 0.90


@pytest.mark.slow  # alone 6.5 min on 2 cores, 3.5 of them its own (export, 300 updates, decoding): docs/tests.md
def test_concat_started_from_an_exported_sentence_model_reads_its_context(probe, hf_concat_model, sentence_model,
                                                                          sentence_acc):
    folder = hf_concat_model["folder"]
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["model_type"] == "fsmt" and config["docctx"]["model"] == "transformer"
    with open(hf_concat_model["log"], encoding="utf-8") as f:
        log = f.read()
    # every weight from the folder, the separator's row grown (the sentence data has no <sep>)
    assert f"initialised from {folder} (--init-from-pretrained, docctx-exported transformers fsmt)" in log
    assert "1 grown, 0 new, 0 left out" in log
    # it starts near where the sentence model ended, not where a model from scratch starts: its
    # loss over the first logged updates is closer to the sentence model's last logged loss than
    # to the sentence model's own over those first updates from scratch (same data, schedule, seed)
    ours, sentence = pu.train_losses(hf_concat_model["log"]), pu.train_losses(sentence_model["log"])
    print(f"training loss over the first 50 updates: {ours[0]:.3f} from the folder, {sentence[0]:.3f} for the "
          f"sentence model from scratch (its last: {sentence[-1]:.3f})")
    assert ours[0] < (sentence[0] + sentence[-1]) / 2

    res = accuracy(probe, hf_concat_model, *K, "--context-sides", "both")
    ph = res["by_phenomenon"]
    ana, base = ph["anaphora"]["accuracy"], sentence_acc["by_phenomenon"]["anaphora"]["accuracy"]
    print(f"pronouns: concat_transformer from the transformers folder {ana:.3f} vs the sentence model {base:.3f}; "
          f"consistency {ph['consistency']['accuracy']:.3f}")
    assert ana >= PRONOUNS
    reads_content(probe, hf_concat_model, "concat_transformer from the transformers folder", MARGIN["concat"])
