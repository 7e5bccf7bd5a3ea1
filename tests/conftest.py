import argparse
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))
pytest_plugins = ["probe_fixtures", "hf_export_fixtures"]

# the toy documents and tiny model of the tests and benchmarks (pytest.ini puts the
# repository root on sys.path)
from benchmarks.toy import TINY_MODEL, prepare_command, write_split, write_toy_documents  # noqa: E402,F401


def pytest_configure(config):
    """One intra-op thread in the test process too: beside the background trainings a second
    thread only competes for the cores (docs/tests.md). The write record of the output guard
    (``fairseq_docctx.data.outputs``: which files the commands wrote) is the session's own,
    in a temporary folder, for the tests and every command they run: the user's record is
    neither read nor written."""
    import tempfile

    import torch

    import cli_fork

    os.environ["DOCCTX_STATE_DIR"] = tempfile.mkdtemp(prefix="docctx-state-")
    cli_fork.enable()

    torch.set_num_threads(1)


def pytest_collection_modifyitems(session, config, items):
    """The tests that read the context probe's trained models run last, in the order their
    models are trained (probe_fixtures.py: QUEUE; a test waits for the last of its models): the
    models train in the background meanwhile, and a test runs as soon as its models are there."""
    from probe_fixtures import QUEUE

    alias = {"sentence_acc": "sentence_model", "rnnsearch_acc": "rnnsearch_model"}

    def last_model(item):
        used = {alias.get(f, f) for f in getattr(item, "fixturenames", ())} & set(QUEUE)
        return max(map(QUEUE.index, used), default=-1)

    # a stable sort: the other tests first, in their order
    items[:] = sorted(items, key=last_model)


def venv_env():
    """Environment for subprocesses: the interpreter's bin dir first on PATH."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # one thread a command: the probe's models train beside the tests (one thread each), and
    # the tiny models gain nothing from a second thread (measured in docs/tests.md)
    env.setdefault("OMP_NUM_THREADS", "1")
    # idle OpenMP threads sleep instead of spinning
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_in_process(cli_main, argv, capsys):
    """A command's ``cli_main`` in this process: (exit code, stdout, stderr)."""
    try:
        cli_main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def file_digests(*roots):
    """``{path: SHA-1 of its bytes}`` of every file under ``roots`` (a file root: the file
    itself), links followed: what a command that must not destroy its inputs leaves as it was."""
    import hashlib

    out = {}
    for root in map(Path, roots):
        for f in ([root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())):
            out[str(f)] = hashlib.sha1(f.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared corpora at {SHARED_DATA}")
    return SHARED_DATA


def ct2_export(ckpt, data, out, *more):
    """``docctx-export ctranslate2 CKPT OUT --data DATA [more]`` in process; ``out``."""
    from fairseq_docctx.cli.export import cli_main as export_main

    try:
        export_main(["ctranslate2", str(ckpt), str(out), "--data", str(data), *more])
    except SystemExit as e:
        assert e.code == 0, e
    return out


def docids_documents(src):
    """The documents of a ``docids``-format input (``X.src`` beside ``X.docids``): lists of lines."""
    src = Path(src)
    docs = {}
    for doc, line in zip(src.with_suffix(".docids").read_text().splitlines(), src.read_text().splitlines()):
        docs.setdefault(doc, []).append(line)
    return list(docs.values())


def beam_search(model, d, sources, beam, max_len_b=400):
    """fairseq's ``SequenceGenerator`` (beam ``beam``, at most ``max_len_b`` tokens) over the
    source token lists ``sources`` (left-padded, as fairseq batches them): its hypotheses."""
    import torch
    from fairseq.data import data_utils
    from fairseq.sequence_generator import SequenceGenerator

    src = data_utils.collate_tokens(sources, d.pad(), d.eos(), left_pad=True)
    sample = {"id": torch.arange(len(sources)),
              "net_input": {"src_tokens": src, "src_lengths": torch.LongTensor([len(s) for s in sources])}}
    gen = SequenceGenerator([model], d, beam_size=beam, max_len_a=0, max_len_b=max_len_b)
    with torch.no_grad():
        return gen.generate([model], sample)


def maruf_ted_files(root):
    """A DATA folder for the recipes with Maruf et al.'s six TED file names (two one-line
    documents each)."""
    root = Path(root)
    corpus = root / "IWSLT2017"
    corpus.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        for lang in ("en", "de"):
            (corpus / f"concatenated_en2de_{split}_{lang}.txt").write_text("<d>\na\n<d>\nb\n")
    return root


def run(cmd, cwd=None, timeout=900, check=True, env=None):
    """Run a command (list) with the venv's scripts on PATH (and ``env``'s variables); fail
    with its output."""
    import subprocess

    import cli_fork

    full_env = {**venv_env(), **(env or {})}
    if cli_fork.entry_point(cmd, full_env):
        p = cli_fork.completed(cmd, full_env, cwd=cwd, timeout=timeout)
    else:
        p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=full_env, capture_output=True, text=True,
                           timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(
            f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-6000:]}"
        )
    return p


@pytest.fixture(scope="session")
def toy_bin(tmp_path_factory):
    """Toy documents prepared with docctx-prepare (no SentencePiece)."""
    root = tmp_path_factory.mktemp("toy")
    return prepare_documents(write_toy_documents(root / "raw"), root / "bin")


def prepare_documents(raw, dest):
    """``raw/{train,valid,test}.{src,tgt,docids}`` through docctx-prepare (joined dictionary)
    into ``dest``."""
    run(prepare_command(raw, dest))
    return dest


@pytest.fixture(scope="session")
def concat_both_ckpt(toy_bin, tmp_path_factory):
    """concat_transformer with source and target context (K=2) trained on the toy data."""
    save = tmp_path_factory.mktemp("concat_both")
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx",
         "--task", "document_translation", "--context-size", "2", "--context-sides", "both",
         "--arch", "concat_transformer", *TINY_MODEL, "--max-tokens", "600",
         "--max-epoch", "6", "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def sent_ckpt(toy_bin, tmp_path_factory):
    """A tiny sentence-level transformer trained on the toy documents."""
    save = tmp_path_factory.mktemp("ct2_sent")
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--context-size", "0", "--arch", "transformer", *TINY_MODEL, "--max-tokens", "1000",
         "--max-epoch", "4", "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt"


def toy_dictionary():
    """A fairseq dictionary with <sep> and the words w0..w29 (unit tests of the models)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    d.add_symbol("<sep>")
    for i in range(30):
        d.add_symbol(f"w{i}")
    return d


def tilted_toward_ending(model, d):
    """A random segment model made to prefer ending the segment, then the separator: left
    alone it closes every segment after its first sentence, and with the sentence count kept
    it leaves most sentences empty (the output layer's logits get +4 on </s>, +2 on <sep>)."""
    import torch
    from fairseq.models.transformer import TransformerDecoderBase

    bias = torch.zeros(len(d))
    bias[d.eos()], bias[d.index("<sep>")] = 4.0, 2.0
    decoder = model.decoder
    decoder.output_layer = lambda features: TransformerDecoderBase.output_layer(decoder, features) + bias
    return model


def paper_size_model(model_cls, arch, context_sides="source", vocab=30000, **over):
    """``model_cls`` built as the named architecture ``arch`` makes it (``over``: flags given
    on top), with one joint dictionary of ``vocab`` entries, shared embeddings and a task with
    K=3: the papers' settings, for counting parameters (nothing is trained). Returns
    ``(model, args)``."""
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY

    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_separator="<sep>", context_sides=context_sides, context_size=3)

    args = argparse.Namespace(arch=arch, share_all_embeddings=True, **over)
    ARCH_CONFIG_REGISTRY[arch](args)
    return model_cls.build_model(args, Task()), args


def count_parameters(model, where=lambda name: True):
    return sum(p.numel() for n, p in model.named_parameters() if where(n))


def toy_document_batch(d, doc_lengths, seed=0, sides="both"):
    """One collated batch of all sentences of random documents with the given lengths
    (K=3 context on ``sides``), sentences of 1-6 random words."""
    import numpy as np
    import torch
    from fairseq.data import LanguagePairDataset

    from fairseq_docctx.data.doc_index import DocIndex
    from fairseq_docctx.data.document_dataset import DocumentPairDataset

    rng = np.random.RandomState(seed)
    n = sum(doc_lengths)
    mk = lambda: [torch.LongTensor(list(rng.randint(5, 35, rng.randint(1, 7))) + [d.eos()]) for _ in range(n)]  # noqa: E731
    src, tgt = mk(), mk()
    pair = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)
    docs = DocIndex([f"d{i}" for i in range(len(doc_lengths))], np.array(doc_lengths))
    ds = DocumentPairDataset(pair, docs, 3, sides, shuffle=False)
    return ds.collater([ds[i] for i in range(n)])


def assert_incremental_equals_full(model, src, lengths, prev, context=None, atol=1e-5, label=None):
    """Beam 2, step by step from fairseq's incremental state with beam search's reorderings
    (rows redrawn among the beams of their sentence; sentence 1 leaves the batch at step 3):
    each step's output equals the full teacher-forced run's (``model`` in eval mode)."""
    import torch

    B, T = prev.shape
    with torch.no_grad():
        full = model(src, lengths, prev, context=context)[0]
        enc = model.encoder(src, src_lengths=lengths, context=context)
        sent = torch.arange(B).repeat_interleave(2)  # row -> sentence (2 beams each)
        enc = model.encoder.reorder_encoder_out(enc, sent)
        state = {}
        g = torch.Generator().manual_seed(0)
        for t in range(T):
            if t > 0:
                # each row takes the state of a random beam of its own sentence
                order = sent * 2 + torch.randint(0, 2, sent.shape, generator=g)
                pos = {int(s): i for i, s in enumerate(torch.unique(sent))}
                order = torch.tensor([2 * pos[int(s)] + int(o % 2) for s, o in zip(sent, order)])
                if t == 3:  # sentence 1 finishes
                    keep = (sent != 1).nonzero().squeeze(1)
                    order, sent = order[keep], sent[keep]
                model.decoder.reorder_incremental_state_scripting(state, order)
                enc = model.encoder.reorder_encoder_out(enc, order)
            out = model.decoder(prev[sent, : t + 1], encoder_out=enc, incremental_state=state)[0]
            assert torch.allclose(out[:, -1], full[sent, t], atol=atol), (label, t)


def write_reverse_task(out_dir):
    """The reverse task of the RNN tests: documents of 5 sentences of 3 to 10 random words
    (20 words) whose target is the source reversed and upper-cased (3,000 / 100 / 200
    sentences; no sentence depends on another)."""
    return write_toy_documents(out_dir, docs=(600, 20, 40), doc_sentences=(5, 5), words=20, lengths=(3, 10),
                               reverse=True)


def _prepare_reverse_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("reverse")
    return prepare_documents(write_reverse_task(root / "raw"), root / "bin")


#: the reverse task's data and rnnsearch, made in a background thread from the start of the
#: session when a collected test needs the rnnsearch (the longest training the tests in the
#: foreground wait for; it then runs beside them, as the probe's trainings do)
_REVERSE = {}


@pytest.fixture(scope="session", autouse=True)
def _start_rnnsearch_reverse(request, tmp_path_factory):
    if not any("rnnsearch_reverse" in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield
        return
    import concurrent.futures

    from probe_fixtures import lower_priority

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="reverse",
                                                 initializer=lower_priority)
    _REVERSE["data"] = pool.submit(_prepare_reverse_bin, tmp_path_factory)
    _REVERSE["rnnsearch"] = pool.submit(lambda: _train_rnnsearch_reverse(_REVERSE["data"].result(), tmp_path_factory))
    yield
    pool.shutdown(wait=False, cancel_futures=True)
    _REVERSE.clear()


@pytest.fixture(scope="session")
def reverse_bin(tmp_path_factory):
    """The reverse task (:func:`write_reverse_task`) prepared with docctx-prepare."""
    if "data" in _REVERSE:
        return _REVERSE["data"].result()
    return _prepare_reverse_bin(tmp_path_factory)


#: a tiny rnnsearch (and the optimisation of the RNN tests)
RNN_TINY = [
    "--encoder-embed-dim", "32", "--encoder-hidden-size", "64", "--decoder-embed-dim", "32",
    "--decoder-hidden-size", "64", "--decoder-out-embed-dim", "32", "--attention-dim", "32",
    "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-2", "--cpu", "--seed", "1",
    "--log-format", "simple", "--num-workers", "0",
]


@pytest.fixture(scope="session")
def rnnsearch_reverse(reverse_bin, tmp_path_factory):
    """rnnsearch trained on the reverse task through ``document_translation --context-size 0``:
    ``checkpoint`` and the training ``log``."""
    if "rnnsearch" in _REVERSE:
        return _REVERSE["rnnsearch"].result()
    return _train_rnnsearch_reverse(reverse_bin, tmp_path_factory)


def _train_rnnsearch_reverse(reverse_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("rnnsearch_reverse")
    p = run(["fairseq-train", reverse_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--context-size", "0", "--arch", "rnnsearch", *RNN_TINY, "--dropout", "0", "--max-tokens", "1000",
             "--max-update", "400", "--log-interval", "50", "--no-epoch-checkpoints", "--save-dir", save],
            env={"OMP_NUM_THREADS": "2"})  # the thread count its >= 0.9 exact-match bound is set for
    return {"checkpoint": save / "checkpoint_last.pt", "log": p.stdout + p.stderr}
