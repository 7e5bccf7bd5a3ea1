"""Where a ``fairseq-train`` run resumes from: the initialisations of a model's weights
(:mod:`~fairseq_docctx.models.sentence_init`, :mod:`~fairseq_docctx.models.pretrained_init`)
are not applied again on a resume."""
import os


def restore_path(args):
    """The checkpoint fairseq-train will restore the model from (as
    ``checkpoint_utils.load_checkpoint`` finds it: ``--restore-file``, by default
    ``checkpoint_last.pt`` in ``--save-dir``), or ``None`` on a first launch / outside
    fairseq-train."""
    restore, save_dir = getattr(args, "restore_file", None), getattr(args, "save_dir", None)
    if not restore or save_dir is None:
        return None
    suffix = getattr(args, "checkpoint_suffix", "") or ""
    if restore == "checkpoint_last.pt":
        path = os.path.join(save_dir, f"checkpoint_last{suffix}.pt")
    else:
        path = restore.replace(".pt", suffix + ".pt") if suffix else restore
    return path if os.path.exists(path) else None
