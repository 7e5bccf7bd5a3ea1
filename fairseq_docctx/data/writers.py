"""Write translated documents back in the format they were read in (see ``readers``)."""
import html
from typing import IO, List, Sequence

from .readers import Document


def write_documents(docs: Sequence[Document], translations: Sequence[Sequence[str]], fmt: str,
                    out: IO[str], docids_out: IO[str] = None, src_lang: str = "src",
                    tgt_lang: str = "tgt", sysid: str = "fairseq_docctx") -> None:
    """``translations[i][j]`` translates ``docs[i].sentences[j]``.

    ``docids``: one sentence per line; the document ids go to ``docids_out`` (if given).
    ``blank``: an empty line between documents. ``marker``: ``<d>`` before each document.
    ``xml``: an IWSLT/WMT-style ``<tstset>`` keeping every docid and seg id.
    """
    if len(docs) != len(translations):
        raise ValueError("one translation list per document is needed")
    for d, t in zip(docs, translations):
        if len(d.sentences) != len(t):
            raise ValueError(f"document {d.doc_id!r}: {len(d.sentences)} sentences, {len(t)} translations")
    clean = [[" ".join(s.split()) for s in t] for t in translations]
    if fmt == "docids":
        for d, t in zip(docs, clean):
            for s in t:
                out.write(s + "\n")
                if docids_out is not None:
                    docids_out.write(d.doc_id + "\n")
    elif fmt == "blank":
        out.write("\n\n".join("\n".join(t) for t in clean) + "\n")
    elif fmt == "marker":
        for t in clean:
            out.write("<d>\n" + "".join(s + "\n" for s in t))
    elif fmt == "xml":
        q = lambda s: html.escape(s, quote=True)  # noqa: E731
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n')
        out.write(f'<tstset setid="docctx" srclang="{q(src_lang)}" trglang="{q(tgt_lang)}">\n')
        for d, t in zip(docs, clean):
            out.write(f'<doc docid="{q(d.doc_id)}" sysid="{q(sysid)}">\n')
            seg_ids: List[str] = d.seg_ids or [str(j + 1) for j in range(len(t))]
            for sid, s in zip(seg_ids, t):
                out.write(f'<seg id="{q(sid)}">{html.escape(s, quote=False)}</seg>\n')
            out.write("</doc>\n")
        out.write("</tstset>\n</mteval>\n")
    else:
        raise ValueError(f"unknown output format {fmt!r}")
