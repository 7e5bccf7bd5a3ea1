"""benchmarks/bench_segments.py: the segment models are compared with a transformer of the
same size (the options fairseq-train parses from the script's command lines) and read segments
of the script's size while the transformer reads sentences."""

import pytest
from fairseq import options

from benchmarks import bench_segments

SIZE = ("encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
        "decoder_ffn_embed_dim", "encoder_attention_heads", "decoder_attention_heads", "share_all_embeddings",
        "dropout", "max_tokens", "lr")

def parsed(name, size, segment_tokens=128):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, bench_segments.train_argv("DATA", name, size, segment_tokens))

@pytest.mark.parametrize("size", list(bench_segments.SIZES))
def test_segment_models_of_the_transformers_size_read_segments(size):
    base = parsed(bench_segments.SENTENCE, size)
    assert base.arch == "transformer" and base.doc_mode != "segments"  # the task default: sentences
    for name in bench_segments.SEGMENT_MODELS:
        m = parsed(name, size)
        assert m.arch == name
        assert {k: getattr(m, k) for k in SIZE} == {k: getattr(base, k) for k in SIZE}
        assert (m.doc_mode, m.max_segment_tokens) == ("segments", 128)
