"""A toy document format, as a plugin would add one: each line ``DOCID<TAB>sentence``, a
document one run of lines with the same id. This module is all that the format needs; it
is registered with ``fairseq_docctx.data.formats.register(TabFormat())``
(tests/test_extension_points.py)."""
from fairseq_docctx.data.documents import Document, DocumentFormatError, clean, match_structure
from fairseq_docctx.data.formats import DocumentFormat, FormatWriter


class TabWriter(FormatWriter):
    def write(self, doc, sentences):
        self.out.write("".join(f"{doc.doc_id}\t{s}\n" for s in sentences))


class TabFormat(DocumentFormat):
    name = "toy-tab"
    own_ids = True
    writer = TabWriter

    def detect(self, lines, path, docids):
        first = lines.first(lambda t: bool(t.strip()))
        return first is not None and "\t" in first.strip("\t")

    def documents(self, lines, path, options):
        doc, seen = None, set()
        for i, line in lines:
            doc_id, tab, text = line.partition("\t")
            if not tab or not doc_id.strip() or not (clean(text) or options.allow_empty):
                raise DocumentFormatError(path, i, "not DOCID<TAB>sentence")
            if doc is None or doc.doc_id != doc_id:
                if doc_id in seen:
                    raise DocumentFormatError(path, i, f"document {doc_id!r} reappears")
                if doc is not None:
                    yield doc
                seen.add(doc_id)
                doc = Document(doc_id, [], [], path)
            doc.sentences.append(clean(text))
            doc.lines.append(i)
        if doc is not None:
            yield doc

    def align(self, src, tgt):
        match_structure(src, tgt)
        return tgt, 0
