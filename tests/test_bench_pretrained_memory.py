"""benchmarks/bench_pretrained_memory.py builds each family's model with the sizes it names:
the parameters it counts for the WMT19 En-De size equal the closed form of a post-norm
Transformer with those sizes."""
import json

import pytest

from benchmarks import bench_pretrained_memory as bench


def transformer_parameters(layers, dim, ffn, dec_ffn, rows):
    """A post-norm fairseq Transformer with sinusoidal positions, one embedding table a side
    (the decoder's shared with its output projection): attention projections with biases, two
    (encoder) or three (decoder) layer norms a layer, the feed-forward layers with biases."""
    attention = 4 * (dim * dim + dim)
    encoder = attention + 2 * 2 * dim + 2 * dim * ffn + ffn + dim
    decoder = 2 * attention + 3 * 2 * dim + 2 * dim * dec_ffn + dec_ffn + dim
    return layers * (encoder + decoder) + 2 * rows * dim


@pytest.mark.slow  # ~8 s: make test-all
def test_counted_parameters_are_the_named_sizes(tmp_path, capsys):
    size = bench.FAMILIES["wmt19-en-de"]
    data = bench.prepare("wmt19-en-de", size, root=tmp_path)
    bench.worker("wmt19-en-de", str(data), 1024, step=False)
    out = json.loads(capsys.readouterr().out.split("RESULT ", 1)[1])
    assert out["rows"] == 42024 + 1  # the release's rows and the separator
    assert out["params"] == transformer_parameters(6, 1024, 8192, 4096, 42024 + 1)
