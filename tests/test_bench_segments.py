"""benchmarks/bench_segments.py: the segment models are compared with a transformer of the
same size (the options fairseq-train parses from the script's command lines), read segments of
the script's size while the transformer reads sentences, and the script's fairseq-generate
worker decodes with the sentence-count constraint as asked and reports the task's counts."""
import re

import pytest
from fairseq import options

from benchmarks import bench_segments
from conftest import REPO, TINY_MODEL, run

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


def decode(data, ckpt, constraint):
    """The worker's fairseq-generate output on the toy test split: {id: score}, the SEGMENTS
    counts and fairseq's rate line."""
    p = run(["python", "-m", bench_segments.MODULE, bench_segments.GENERATE_WORKER, constraint, data,
             "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation", "--doc-mode", "segments",
             "--path", ckpt, "--beam", "2", "--max-tokens", "600", "--gen-subset", "test", "--cpu"], cwd=REPO)
    out = p.stdout + p.stderr
    scores = {int(i): float(s) for i, s in re.findall(r"^H-(\d+)\t([^\t]*)\t", out, re.M)}
    return scores, re.findall(r"^SEGMENTS (\d+) (\d+)$", out, re.M), bench_segments.fairseq_rate(out)


def test_the_worker_sets_the_constraint_and_counts_fallbacks(toy_bin, tmp_path):
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--doc-mode", "segments", "--max-segment-tokens", "64", "--arch", "doc2doc_transformer", *TINY_MODEL,
         "--max-tokens", "600", "--max-epoch", "2", "--no-epoch-checkpoints", "--save-dir", tmp_path])
    ckpt = tmp_path / "checkpoint_last.pt"
    on, counts_on, rate_on = decode(toy_bin, ckpt, "on")
    off, counts_off, rate_off = decode(toy_bin, ckpt, "off")
    test_sentences = len((toy_bin.parent / "raw" / "test.src").read_text().splitlines())
    assert sorted(on) == sorted(off) == list(range(test_sentences))
    assert rate_on[0] == rate_off[0] == test_sentences
    # one SEGMENTS line each: fallbacks <= segments decoded, and segments hold several sentences
    for counts in (counts_on, counts_off):
        assert len(counts) == 1
        fallbacks, segments = map(int, counts[0])
        assert 0 <= fallbacks <= segments < test_sentences
    # the constraint changes the decoder's distribution (</s> forbidden before the last
    # sentence): the same model scores its hypotheses differently with it off
    assert on != off
