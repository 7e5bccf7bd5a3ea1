"""The inference engines, registered by name: each is one :class:`~.base.Engine` (its
options, its checks, its loading, the files it reads, its export), and the command lines
call the registry rather than naming an engine. :data:`ENGINES` gives ``--engine`` its
choices (:func:`add_engine_arguments`); :func:`engine_of` is the parsed options' engine,
once the options of another engine are refused.

Adding an engine is one module beside these, with its :class:`~.base.Engine`, and its line
in :data:`ENGINES`; :data:`EXPORTS` gives ``docctx-export`` its subcommands. The registry
and the engines' modules import nothing heavy (the command lines parse their options with
them); an engine imports what it runs when it runs it.
"""
from typing import Dict

from .base import Engine
from .ctranslate2 import CTranslate2Engine
from .fairseq import FairseqEngine
from .transformers import TransformersEngine

#: the engines by name, the default first
ENGINES: Dict[str, Engine] = {e.name: e for e in (FairseqEngine(), CTranslate2Engine(), TransformersEngine())}
#: ``docctx-export``'s targets by name: the engines that write a model of their own
#: (:attr:`~.base.Engine.export_help`)
EXPORTS: Dict[str, Engine] = {e.name: e for e in ENGINES.values() if e.export_help}
#: the engine when ``--engine`` is not given
DEFAULT = next(iter(ENGINES))


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_engine_arguments(parser, help_prefix: str = "what decodes: ", options: bool = True) -> None:
    """``--engine`` (its choices the registered engines) on ``parser``, and with ``options``
    every engine's own options (:attr:`~.base.Engine.translate_options`), none given by default."""
    parser.add_argument("--engine", choices=list(ENGINES), default=DEFAULT,
                        help=help_prefix + " or ".join(e.summary for e in ENGINES.values()))
    if options:
        for engine in ENGINES.values():
            for flag, keywords in engine.translate_options:
                parser.add_argument(flag, default=None, **keywords)


def engine_of(options) -> Engine:
    """The engine of the parsed ``options`` (``options.engine``), once an option of another
    engine that was given is refused (``ValueError``: ``--ct2-prefix one-pass: applies to
    --engine ctranslate2 only``) and the engine has refused what does not apply to it
    (:meth:`~.base.Engine.check_options`)."""
    engine = ENGINES[options.engine]
    for other in (e for e in ENGINES.values() if e is not engine):
        for flag, _ in other.translate_options:
            value = getattr(options, _dest(flag), None)
            if value is not None:
                raise ValueError(f"{flag} {value}: applies to --engine {other.name} only")
    engine.check_options(options)
    return engine
