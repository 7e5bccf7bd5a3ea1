"""benchmarks/bench_rnn.py: every model is compared with a baseline of the same size (the
options fairseq-train parses from the script's command lines), a context model's baseline is
the architecture it is initialised from, and each generation pair has its paper's beam."""
import sys

import pytest
from fairseq import options

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_rnn  # noqa: E402

SIZE = ("encoder_embed_dim", "encoder_hidden_size", "decoder_embed_dim", "decoder_hidden_size",
        "decoder_out_embed_dim", "share_all_embeddings")


def parsed(name, size):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, bench_rnn.train_argv("DATA", name, size))


@pytest.mark.parametrize("size", list(bench_rnn.SIZES))
@pytest.mark.parametrize("model", list(bench_rnn.BASELINE))
def test_baseline_of_the_same_size(model, size):
    m, b = parsed(model, size), parsed(bench_rnn.BASELINE[model], size)
    assert {k: getattr(m, k) for k in SIZE} == {k: getattr(b, k) for k in SIZE}
    if bench_rnn.BASELINE[model] in bench_rnn.RNN_FAMILY:
        # the context model is initialised from its baseline: the same RNNSearch
        assert (m.attention_dim, m.decoder_output_activation) == (b.attention_dim, b.decoder_output_activation)


def test_generation_pairs():
    assert bench_rnn.BEAM == {"hrnn": 5, "isg": 10}
    for m in bench_rnn.GENERATE:
        assert bench_rnn.BASELINE[m] in bench_rnn.RNN_FAMILY
        assert parsed(m, "tiny").context_size == int(bench_rnn.GENERATE[m][-1])
