"""The benchmarks of fairseq_docctx (``docs/benchmarks.md``). Each is a module run from the
repository root: ``python -m benchmarks.bench_foundation`` (``make bench``),
``python -m benchmarks.bench_models``, ... (the checkout's ``fairseq_docctx`` is then the one
imported)."""
