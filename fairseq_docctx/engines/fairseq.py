"""The fairseq engine: a fairseq checkpoint decoded by fairseq's own search, loaded through
the hub (:func:`~fairseq_docctx.hub.from_pretrained`)."""
import os

from .base import Engine, ModelFiles, task_overrides


class FairseqEngine(Engine):
    name = "fairseq"
    summary = "fairseq (default)"

    def load(self, options):
        from ..hub import from_pretrained

        return from_pretrained(options.path, data=options.data, spm_model=options.spm_model,
                               cpu=options.cpu, fp16=options.fp16, draft_path=options.draft_path,
                               draft_beam=options.draft_beam or options.beam, **task_overrides(options))

    def draft_loader(self):
        from ..inference.drafter import load_draft_translator

        return load_draft_translator

    def model_files(self, options) -> ModelFiles:
        """The checkpoint (``checkpoint_best.pt`` of a ``--path`` folder), and the data
        directories of its folder and of the data it is loaded with (without ``--data``: the
        one it was trained on, where its folder has no dictionaries)."""
        from ..inference.checkpoint import checkpoint_path, data_directory_of_file

        checkpoint = checkpoint_path(options.path)
        folders = [os.path.dirname(os.path.abspath(checkpoint))]
        if checkpoint:
            folders.append(data_directory_of_file(checkpoint, options.data))
        return ModelFiles(checkpoint, [], folders)
