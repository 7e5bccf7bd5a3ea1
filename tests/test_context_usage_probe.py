"""The training methods of docs/context-usage.md on the context probe (slow: six trainings of 300
updates: 6:21 on two cores shared with a `make test` run).

Each method trains its model for the same budget as the model without it
(``benchmarks/bench_context_usage.py``, seed 1): a ``concat_transformer`` (K=2, source and
target context) with CoWord dropout, the context-discounted loss and segment-shifted positions,
and a ``han_encoder_transformer`` pre-trained on split pairs (divide and rule) against the same
HAN trained on the documents only. Every model must resolve the probe's pronouns from its
context and read what its context says: CXMI true context against a random document's context
at least a share of that of the same model without the method. The shares are calibrated on the
measured runs of docs/context-usage.md (seeds 1 and 2, 300 updates), where no method reaches the
model without it: the lowest ratios measured are 0.75 (CoWord dropout, seed 1) for the
concatenation methods, asked for 0.5, and 0.43 (divide and rule, seed 2), asked for 0.25. The
test guards that a method keeps the model reading its context; it does not claim a gain.
"""
import pytest

pytestmark = pytest.mark.slow

UPDATES = 300
# a method's CXMI true - random >= SHARE x the same model's without it (measured: the lowest ratio)
SHARE = {"coword": 0.5, "focused": 0.5, "focused-shift": 0.5,  # 0.75, 0.94, 0.83
         "han-divide-rule": 0.25}  # 0.43


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    from benchmarks import bench_context_usage as bench

    work = str(tmp_path_factory.mktemp("context-usage"))
    probe = bench.prepare(work)
    probe.update(split=bench.prepare_split(probe), k0=bench.sentence_model(probe, UPDATES, work))
    methods = dict(bench.runs(0.1), **{name: [] for name in bench.DIVIDE_RULE})
    jobs = [(name, method, 1, UPDATES, probe, work) for name, method in methods.items()]
    return {row["run"]: row for row in bench.run_jobs(bench.one_run, jobs, 2)}


@pytest.mark.parametrize("method,baseline", [
    ("coword", "baseline"), ("focused", "baseline"), ("focused-shift", "baseline"),
    ("han-divide-rule", "han"),
])
def test_method_keeps_the_model_reading_its_context(rows, method, baseline):
    base, row = rows[baseline], rows[method]
    assert base["accuracy"]["anaphora"] >= 0.95 and base["cxmi"]["true_vs_random"] > 0.03, base
    assert row["accuracy"]["anaphora"] >= 0.95, row
    assert row["cxmi"]["true_vs_random"] >= SHARE[method] * base["cxmi"]["true_vs_random"], (row, base)
