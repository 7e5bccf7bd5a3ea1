"""What the two kinds of pretrained release share (:mod:`.pretrained`: fairseq release folders;
:mod:`.hf_release`: transformers folders): their error, the segmentation kind of a transformers
tokenizer, and the map of the data's languages to a release's language codes."""
from typing import Dict, List, Optional, Sequence, Tuple

#: the kind of a transformers folder's tokenizer (:mod:`.hf_release`; its file: the data folder's copy)
HF_SEGMENTATION = "transformers"


class PretrainedError(ValueError):
    """A release directory that cannot be used; ``str(err)`` is one line naming the file."""


def langtok_langs(langs: List[str], lang_file: str, data_langs: Tuple[str, str],
                  given: Optional[Sequence[str]]) -> Dict[str, str]:
    """{data lang: release language}: ``given`` (``--pretrained-langs``), else each data
    language itself when the list has it, else the one list entry ``CODE_*`` (``en`` ->
    ``en_XX`` of mBART-50, ``eng`` -> ``eng_Latn`` of NLLB)."""
    out = {}
    for k, lang in enumerate(data_langs):
        if given:
            code = given[k]
            if code not in langs:
                raise PretrainedError(f"{lang_file}: no language {code} (--pretrained-langs): the model "
                                      f"has no language token for it")
        elif lang in langs:
            code = lang
        else:
            cands = [x for x in langs if x.startswith(lang + "_")]
            if len(cands) != 1:
                raise PretrainedError(
                    f"{lang_file}: no language {lang}" + (f" (several: {', '.join(cands)})" if cands else "")
                    + "; give the release's codes with --pretrained-langs SRC,TGT")
            code = cands[0]
        out[lang] = code
    return out
