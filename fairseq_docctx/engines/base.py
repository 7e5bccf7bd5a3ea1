"""The engine interface: what runs a trained model for the inference commands
(``docctx-translate``, ``docctx-drafts``, ``docctx-export``), one :class:`Engine` per way of
running it, registered by its name in :mod:`fairseq_docctx.engines`.

An engine declares the options only it reads (:attr:`Engine.translate_options`, which
``docctx-translate`` adds to its command line; another engine's given is refused by the
registry), refuses what does not apply to it (:meth:`Engine.check_options`), loads the
model (:meth:`Engine.load`: a :class:`~fairseq_docctx.hub.DocumentHubInterface`;
:meth:`Engine.draft_loader`: the drafts' translator), says what files it reads
(:meth:`Engine.model_files`, for the output guard) and, where it writes a model of its own,
exports a checkpoint (:meth:`Engine.add_export_arguments`, :meth:`Engine.export`). Nothing
heavy is imported here or by an engine's module: each method imports what it runs."""
from typing import Callable, Iterable, List, NamedTuple, Optional, Tuple


class ModelFiles(NamedTuple):
    """What loading a model reads: the checkpoint (or the file or folder an engine reads in
    its place), other files as ``(what it is, path)``, and the data directories whose files
    (:data:`~fairseq_docctx.data.outputs.DATA_DIRECTORY_FILES`) the model is loaded with."""

    checkpoint: Optional[str]
    files: List[Tuple[str, str]]
    data_folders: Iterable[Optional[str]]


def exported_folder_files(path: str) -> ModelFiles:
    """What loading an exported folder reads: the folder, every file in it, and the folder it
    is in (the ``model_files`` of the engines that decode an export)."""
    import os

    files = []
    if os.path.isdir(path):
        files = [("the exported model's file", os.path.join(path, name)) for name in sorted(os.listdir(path))]
    return ModelFiles(path, files, [os.path.dirname(os.path.abspath(path))])


def task_overrides(options) -> dict:
    """The task options ``docctx-translate``'s command line sets for every engine (the target
    context, the segment models' length window, the context size and its override)."""
    overrides = {"target_context": options.target_context}
    if options.no_sentence_length_window:
        overrides["no_sentence_length_window"] = True
    if options.context_size is not None:
        overrides["context_size"] = options.context_size
    if options.context_override:
        overrides["context_override"] = True
    return overrides


class Engine:
    """One way of running a trained model, registered by :attr:`name`."""

    #: the name ``--engine`` takes
    name: str = ""
    #: what decodes, in ``--engine``'s help
    summary: str = ""
    #: ``docctx-translate``'s options only this engine reads, as ``(flag, argparse keywords)``;
    #: each is ``None`` when not given, and refused with another engine
    translate_options: Tuple[Tuple[str, dict], ...] = ()
    #: ``docctx-export``'s help of this engine's subcommand (empty: the engine exports nothing)
    export_help: str = ""

    def check_options(self, options) -> None:
        """Refuse (``ValueError``, one line) a parsed option of ``docctx-translate`` that does
        not apply to this engine."""

    def load(self, options):
        """The model of ``docctx-translate``'s parsed ``options`` (``--path``, ``--data``,
        ``--spm-model``, the task overrides...), ready to translate documents."""
        raise NotImplementedError

    def draft_loader(self) -> Callable:
        """What loads ``docctx-drafts``' sentence-level translator:
        ``load(path, data_dir, beam=, cpu=, fp16=, **generation)`` -> a
        :class:`~fairseq_docctx.inference.drafter.DraftTranslator`."""
        raise NotImplementedError

    def model_files(self, options) -> ModelFiles:
        """What :meth:`load` reads for ``options``: :class:`ModelFiles`."""
        raise NotImplementedError

    def add_export_arguments(self, parser) -> None:
        """``docctx-export NAME``'s arguments (for an engine with :attr:`export_help`): the
        checkpoint, the folder to write, the data directory and ``--force``, which every
        export takes; an engine adds its own after them."""
        parser.add_argument("checkpoint", metavar="CKPT", help="checkpoint file (.pt)")
        parser.add_argument("outdir", metavar="OUTDIR", help="folder to write (must not exist unless --force; never "
                            "the checkpoint, its folder, the data directory or a folder holding them)")
        parser.add_argument("--data", help="data directory with the dictionaries (default: as docctx-translate "
                            "finds it: the checkpoint's directory, else the training data)")
        parser.add_argument("--force", action="store_true", help="replace OUTDIR if it is an earlier export (a "
                            "folder docctx-export wrote, holding only its files), once the new export is complete")

    def export(self, args) -> str:
        """``docctx-export NAME``: the checkpoint of the parsed ``args`` written for this
        engine; returns what was written, for the command's line (``MODEL (TYPE)``)."""
        raise NotImplementedError


class ExportedEngine(Engine):
    """An engine that decodes a folder ``docctx-export NAME`` wrote (CTranslate2, transformers):
    it reads the folder and every file in it, and refuses ``--fp16`` (the precision is the
    export's, :attr:`precision` says how) and ``--draft-path`` (a model that reads drafts
    does not export)."""

    #: what sets the precision, in the refusal of ``--fp16``
    precision: str = ""

    def check_options(self, options) -> None:
        if options.fp16 or options.draft_path:
            raise ValueError(f"--engine {self.name}: {'--fp16' if options.fp16 else '--draft-path'} does not apply "
                             f"({self.precision}; drafts-reading models do not export)")

    def model_files(self, options) -> ModelFiles:
        """The exported folder and every file in it, and the folder it is in."""
        return exported_folder_files(options.path)
