"""The document formats the package reads and writes, one module each, registered in
:mod:`.registry` (see there for what a format holds and how one is added):

* ``docids``  (:mod:`.docids`)  one sentence a line in ``PREFIX.LANG`` plus one document id a
  line in ``PREFIX.docids``;
* ``blank``   (:mod:`.blank`)   one sentence a line, an empty line between documents;
* ``marker``  (:mod:`.marker`)  one sentence a line, a line ``<d>`` before each document;
* ``xml``     (:mod:`.xml`)     IWSLT/WMT XML or SGML, ``<doc docid=..>`` containing ``<seg id=..>``;
* ``wmt-xml`` (:mod:`.wmt_xml`) the single-file XML of WMT test sets since 2021;
* ``jsonl``   (:mod:`.jsonl`)   JSON Lines, one document a line;
* ``tags``    (:mod:`.tags`)    the IWSLT training files (``train.tags.L1-L2.L``).

Importing this package registers them, in this order (the order of the commands' choices).
"""
from . import docids, blank, marker, xml, wmt_xml, jsonl, tags  # each registers its format
from .registry import DocumentFormat, FormatWriter, Names, ReadOptions, detect, find, get, register, \
    unregister

__all__ = ["DocumentFormat", "FormatWriter", "Names", "ReadOptions", "detect", "find", "get",
           "register", "unregister", "docids", "blank", "marker", "xml", "wmt_xml", "jsonl", "tags"]
