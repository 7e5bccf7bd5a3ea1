"""fairseq's ``--checkpoint-activations`` and ``--offload-activations`` (each layer's activations
dropped after the forward pass and recomputed in the backward pass) on every architecture:
the Transformer-based ones train with them exactly as without (the same loss and gradients,
dropout on), the others refuse them with one line when the model is built (docs/limits.md).
``g_transformer``'s layers keep their group masks for the recomputation: tested in
tests/test_g_transformer.py."""
import pytest
import torch

from conftest import REPO

USER_DIR = str(REPO / "fairseq_docctx")
TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings", "--dropout", "0.1"]

#: the Transformer-based architectures and their options on the toy documents
SUPPORTED = {
    "transformer": ["--context-size", "0"],
    "concat_transformer": ["--context-size", "2", "--context-sides", "both"],
    "han_transformer": ["--context-size", "2", "--context-sides", "both"],
    "qcn_transformer": ["--context-size", "2"],
    "doc2doc_transformer": ["--context-size", "0", "--doc-mode", "segments"],
}
#: the architectures that refuse them, with their options
REFUSED = {
    "mht_transformer": ["--context-size", "1", "--context-sides", "src"] + TINY,
    "rnnsearch": ["--context-size", "0"],
    "hrnn_context": ["--context-size", "1"],
    "isg_rnnsearch": ["--context-size", "1"],
}


def _setup(data, arch, extra):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", USER_DIR, "--task", "document_translation",
                                                "--arch", arch, *extra])
    return args, tasks.setup_task(args)


@pytest.mark.parametrize("arch", list(SUPPORTED))
@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
def test_same_losses_and_gradients(toy_bin, arch, flag):
    runs = []
    for extra in ([], [flag]):
        args, task = _setup(toy_bin, arch, SUPPORTED[arch] + TINY + extra)
        torch.manual_seed(1)
        model = task.build_model(args).train()
        if extra:  # fairseq's wrapping of every layer
            assert all(hasattr(layer, "precheckpoint_forward") for layer in model.encoder.layers)
        criterion = task.build_criterion(args)
        task.load_dataset("train")
        ds = task.dataset("train")
        sample = ds.collater([ds[i] for i in range(12)])

        class Backward:
            def backward(self, loss):
                loss.backward()

        torch.manual_seed(2)  # the same dropout masks in both runs
        loss, _, _ = task.train_step(sample, model, criterion, Backward(), 0)
        runs.append((float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (plain_loss, plain), (ckpt_loss, ckpt) = runs
    assert ckpt_loss == pytest.approx(plain_loss, rel=1e-6)
    assert plain.keys() == ckpt.keys() and len(plain) > 10
    for n in plain:
        assert torch.allclose(plain[n], ckpt[n], atol=1e-6), n


@pytest.mark.parametrize("arch", list(REFUSED))
@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
def test_refused_in_one_line(toy_bin, arch, flag):
    from fairseq_docctx.errors import UsageError

    args, task = _setup(toy_bin, arch, REFUSED[arch] + [flag])
    with pytest.raises(UsageError, match=rf"^{arch} does not support .*{flag}") as e:
        task.build_model(args)
    assert "\n" not in str(e.value)
