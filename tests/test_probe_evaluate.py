"""`docctx-probe evaluate` on the tiny probe models of the probe tests (trained once per
session, tests/probe_fixtures.py): the sentence-level model and the concatenation model side
by side, as `make demo` shows them."""
import json

import probe_utils as pu
from probe_fixtures import K

from fairseq_docctx.cli.probe import cli_main


def test_evaluate_sentence_and_context_model(probe, sentence_model, concat_model, tmp_path,
                                             capsys):
    out = tmp_path / "out"
    capsys.readouterr()
    assert cli_main(["evaluate", "--data", probe["data_bin"], "--annotations", probe["annotations"],
                     "--model", f"sentence={sentence_model['checkpoint']}",
                     "--model", f"context={concat_model['checkpoint']}",
                     "--json", str(out / "res.json"), "--hyp-dir", str(out)]) == 0
    table = capsys.readouterr().out
    print(table)
    res = json.loads((out / "res.json").read_text())
    sent, ctx = res["sentence"], res["context"]
    n = pu.num_sentences(probe["data_bin"])
    hyps = {m: (out / f"{m}.hyp").read_text().splitlines() for m in res}
    assert all(len(h) == n for h in hyps.values())
    # document-order translation through the hub gives fairseq-generate's output
    assert hyps["context"] == pu.generate(probe["data_bin"], concat_model["checkpoint"],
                                          task="document_translation",
                                          extra_args=K + ["--context-sides", "both"])
    # the sentence model cannot see the context: chance on pronouns, CXMI exactly 0
    assert (sent["arch"], sent["reads_context"]) == ("transformer", False)
    assert 0.3 < sent["probe"]["by_phenomenon"]["anaphora"]["accuracy"] < 0.7
    assert sent["cxmi"]["cxmi"] == 0.0 and sent["cxmi"]["cxmi_random"] == 0.0
    # the context model reads and uses it: pronouns right, the true context raises the
    # reference's likelihood and a random one does not help as much
    assert (ctx["arch"], ctx["reads_context"], ctx["context_size"]) == ("concat_transformer", True, 2)
    assert ctx["probe"]["by_phenomenon"]["anaphora"]["accuracy"] >= 0.85
    assert ctx["cxmi"]["cxmi"] > 0.05 and ctx["cxmi"]["true_vs_random"] > 0.05
    rows = {line[:36].strip(): line[36:].split() for line in table.splitlines()[2:]}
    acc = ctx["probe"]["by_phenomenon"]["anaphora"]
    assert rows["pronoun it -> er/sie (anaphora)"][2:] == [
        f"{100 * acc['accuracy']:.1f}%", f"({acc['correct']}/{acc['total']})"]
    assert rows["CXMI, nats/token (true context)"] == ["+0.0000", f"{ctx['cxmi']['cxmi']:+.4f}"]
