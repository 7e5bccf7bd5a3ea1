"""The worked example of docs/adding-a-model.md trains and decodes as the page says."""
import re

import pytest

from conftest import REPO, TINY_MODEL, run


def example_code():
    page = (REPO / "docs" / "adding-a-model.md").read_text()
    part = page.split("## A complete model in one file", 1)[1]
    return re.search(r"```python\n(.*?)```", part, re.S).group(1)


@pytest.mark.slow  # ~25 s: make test-all
def test_documented_example_model_trains_and_decodes(toy_bin, tmp_path):
    pkg = tmp_path / "docctx_example"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import fairseq_docctx  # noqa: F401\n" + example_code())
    save = tmp_path / "ckpt"
    log = run(["fairseq-train", toy_bin, "--user-dir", pkg, "--task", "document_translation",
               "--context-size", "2", "--arch", "avgctx_transformer", *TINY_MODEL, "--max-tokens", "400",
               "--max-update", "10", "--no-epoch-checkpoints", "--save-dir", save])
    assert "does not read document context" not in log.stdout + log.stderr
    p = run(["fairseq-generate", toy_bin, "--user-dir", pkg, "--task", "document_translation",
             "--path", save / "checkpoint_last.pt", "--beam", "2", "--max-len-b", "6", "--batch-size", "8"])
    n = sum(int(l.split("\t")[1]) for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines())
    assert len(re.findall(r"^H-\d+\t", p.stdout, re.M)) == n
