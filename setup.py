from setuptools import find_packages, setup

setup(
    name="fairseq_docctx",
    version="0.1.0",
    description="Document-level (context-aware) NMT as a fairseq --user-dir plugin",
    packages=find_packages(include=["fairseq_docctx", "fairseq_docctx.*"]),
    python_requires=">=3.10",
    # fairseq (the ve-fairseq fork) is installed with --no-deps by the Makefile.
    install_requires=["sentencepiece", "sacrebleu", "numpy", "torch"],
    # the CTranslate2 engine (docctx-export ctranslate2, --engine ctranslate2)
    # ... and transformers folders and hub ids (docctx-prepare --pretrained DIR of a transformers model)
    extras_require={"ctranslate2": ["ctranslate2>=4.5"],
                    "transformers": ["transformers>=5.23,<6", "huggingface_hub>=2.4"]},
    entry_points={
        "console_scripts": [
            "docctx-prepare = fairseq_docctx.cli.prepare:cli_main",
            "docctx-probe = fairseq_docctx.cli.probe:cli_main",
            "docctx-translate = fairseq_docctx.cli.translate:cli_main",
            "docctx-analyze = fairseq_docctx.cli.analyze:cli_main",
            "docctx-score = fairseq_docctx.cli.score:cli_main",
            "docctx-drafts = fairseq_docctx.cli.drafts:cli_main",
            "docctx-generate = fairseq_docctx.cli.generate:cli_main",
            "docctx-average = fairseq_docctx.cli.average:cli_main",
            "docctx-export = fairseq_docctx.cli.export:cli_main",
        ]
    },
)
