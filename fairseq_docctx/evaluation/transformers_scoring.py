"""Teacher-forced scoring through ``transformers``' own forward pass (``--engine
transformers`` of ``docctx-score contrastive`` and ``cxmi``; ``ctxpro``'s translations of a
model of another origin, :meth:`TransformersScorer.translate_documents`): the scorers of
:mod:`.scoring`'s interface (``encode_source``, ``encode_target``, ``score_documents``,
``context_size``, ``reads_context``, ``languages``) over a Hugging Face seq2seq model.

* A folder ``docctx-export transformers`` wrote (:class:`ExportedScorer`): the task's batches
  of the fairseq checkpoint it came from (its dictionaries, K, sides, separator, segments), the
  rows joined with their context as the transformers engine decodes them
  (:class:`~fairseq_docctx.inference.context_rows.ContextRows`: the source context before the
  sentence, the target context before the decoder's start token), scored by the folder's
  ``AutoModelForSeq2SeqLM``.
* Any other transformers translation model, a folder or a hub id (:class:`TransformersScorer`:
  OPUS-MT, NLLB, M2M-100, mBART-50...): its own tokenizer, the K previous sentences of the
  chosen sides joined before the sentence with a separator (the tokenizer's ``sep_token``,
  else its ``eos_token``, or the one given), on the source side before the sentence and on
  the target side before its translation (``labels``: the tokenizer's own target special
  tokens around the whole), and only the sentence's own tokens and the closing ones scored.

``transformers`` is imported only when a scorer is built."""
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..data import context_batch as cb
from ..errors import UsageError
from .scoring import ModelScorer, SentenceScore, TokenDocument

#: the sides a concatenated context is given on (as the task's --context-sides)
CONTEXT_SIDES = ("src", "tgt", "both")


@torch.no_grad()
def forward_logprobs(model, sources: Sequence[List[int]], decoder_inputs: Sequence[List[int]],
                     targets: Sequence[List[int]], src_pad: int, tgt_pad: int) -> List[np.ndarray]:
    """The log-probabilities of every row's ``targets``, the last ``len(target)`` positions of
    its ``decoder_inputs`` (the tokens before each target token), from one forward pass of
    ``model`` over the rows right-padded (learned positions count from the first token)."""
    device = next(model.parameters()).device
    pad = torch.nn.utils.rnn.pad_sequence
    inp = pad([torch.tensor(s, dtype=torch.long) for s in sources], batch_first=True, padding_value=src_pad)
    dec = pad([torch.tensor(d, dtype=torch.long) for d in decoder_inputs], batch_first=True, padding_value=tgt_pad)
    inp, dec = inp.to(device), dec.to(device)
    logits = model(input_ids=inp, attention_mask=inp.ne(src_pad).long(), decoder_input_ids=dec,
                   use_cache=False).logits
    lp = torch.log_softmax(logits.float(), dim=-1)
    out = []
    for i, (d, t) in enumerate(zip(decoder_inputs, targets)):
        pos = torch.arange(len(d) - len(t), len(d), device=device)
        out.append(lp[i, pos, torch.tensor(t, dtype=torch.long, device=device)].cpu().numpy())
    return out


class ExportedScorer(ModelScorer):
    """:class:`ModelScorer` over a folder ``docctx-export transformers`` wrote (a hub of
    :func:`~fairseq_docctx.hub.from_transformers`): the same batches as the checkpoint's, the
    log-probabilities from the folder's transformers model."""

    def __init__(self, hub, max_tokens: int = 4000, batch_size: int = 64):
        from ..inference.transformers_engine import transformers_generator

        super().__init__(hub, max_tokens=max_tokens, batch_size=batch_size)
        self.hf_model = hub.hf_model
        self.rows = transformers_generator(hub.hf_model, hub.task, hub.record, beam=1)

    def target_rows(self, sample) -> List[np.ndarray]:
        ni = sample["net_input"]
        ctx = cb.get_context(ni)
        tpad = self.tgt_dict.pad()
        targets = self.rows.ids(sample["target"].cpu(), tpad)
        prev = self.rows.ids(ni["prev_output_tokens"].cpu(), tpad)
        sources = self.rows.source_ids(ni["src_tokens"], ctx)
        prefixes = self.rows.context_prefix_ids(ctx, [len(t) - 1 for t in targets], len(targets))
        return forward_logprobs(self.hf_model, sources, [p + q for p, q in zip(prefixes, prev)], targets,
                                self.src_dict.pad(), tpad)


def _special(tokenizer, target: bool) -> Tuple[List[int], List[int]]:
    """The ids a tokenizer puts before and after a text (``target``: as ``text_target``):
    its encoding of a probe word with and without special tokens compared."""
    probe = "hello"
    key = "text_target" if target else "text"
    full = tokenizer(**{key: probe})["input_ids"]
    bare = tokenizer(**{key: probe}, add_special_tokens=False)["input_ids"]
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i], full[i + len(bare):]
    raise UsageError("the tokenizer's special tokens around a text could not be told apart from the text")


class TransformersScorer:
    """Any transformers seq2seq translation model (``path``: a folder or a hub id) with its
    own tokenizer; the context concatenated (see the module doc). ``context_size``: the
    previous sentences read (0: none, sentence level); ``context_sides``: of
    :data:`CONTEXT_SIDES`; ``separator``: the text between two sentences (default the
    tokenizer's ``sep_token``, else its ``eos_token``); ``src_lang`` / ``tgt_lang``: the
    tokenizer's language codes where it has them (NLLB's ``eng_Latn``, mBART-50's
    ``en_XX``)."""

    reads_segments = False

    def __init__(self, path: str, context_size: int = 0, context_sides: str = "src", separator: Optional[str] = None,
                 src_lang: Optional[str] = None, tgt_lang: Optional[str] = None, cpu: bool = True,
                 max_tokens: int = 4000, batch_size: int = 64, languages=(None, None)):
        from ..inference.transformers_export import import_transformers

        transformers = import_transformers()
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if context_sides not in CONTEXT_SIDES:
            raise UsageError(f"--context-sides: one of {', '.join(CONTEXT_SIDES)}")
        if context_size < 0:
            raise UsageError("--context-size: 0 or more previous sentences")
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(path)
            self.model = transformers.AutoModelForSeq2SeqLM.from_pretrained(path)
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(f"--path {path}: transformers cannot load it as a translation model "
                             f"({str(e).splitlines()[0]})") from None
        self.model.eval()
        if not cpu and torch.cuda.is_available():
            self.model.cuda()
        tok = self.tokenizer
        for name, code in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
            if code is not None:
                if not hasattr(tok, name):
                    raise UsageError(f"--tokenizer-{name.replace('_', '-')}: the tokenizer of {path} has no "
                                     "language codes")
                setattr(tok, name, code)
        self.path = path
        self._context_size, self.context_sides = int(context_size), context_sides
        sep = separator if separator is not None else (tok.sep_token or tok.eos_token)
        if not sep:
            raise UsageError(f"--context-separator: the tokenizer of {path} has neither sep_token nor eos_token")
        self.separator = sep
        # a separator of spaces only: the sentences' tokens follow each other
        self.src_sep = tok(sep, add_special_tokens=False)["input_ids"] if sep.strip() else []
        self.tgt_sep = tok(text_target=sep, add_special_tokens=False)["input_ids"] if sep.strip() else []
        self.src_special = _special(tok, False)
        self.tgt_special = _special(tok, True)
        config = self.model.config
        self.start = config.decoder_start_token_id
        if self.start is None:
            raise UsageError(f"--path {path}: its config has no decoder_start_token_id")
        self.src_pad = tok.pad_token_id if tok.pad_token_id is not None else config.pad_token_id
        self.tgt_pad = config.pad_token_id if config.pad_token_id is not None else self.src_pad
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 1024)
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self.languages = tuple(languages)

    @property
    def context_size(self) -> int:
        return self._context_size

    @property
    def reads_context(self) -> bool:
        return self._context_size > 0

    def encode_source(self, sentence: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer(sentence, add_special_tokens=False)["input_ids"], dtype=torch.long)

    def encode_target(self, sentence: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer(text_target=sentence, add_special_tokens=False)["input_ids"],
                            dtype=torch.long)

    def _joined(self, sentences: Sequence[torch.Tensor], sep: List[int], use: bool) -> Tuple[List[int], List[int]]:
        """``(context ids, sentence ids)``: the context sentences (all but the last; none
        unless ``use``) each followed by the separator, and the last sentence."""
        ctx: List[int] = []
        if use:
            for s in sentences[:-1]:
                ctx += s.tolist() + sep
        return ctx, sentences[-1].tolist()

    def row(self, document: TokenDocument) -> Tuple[List[int], List[int], List[int]]:
        """``(source ids, decoder input ids, scored target ids)`` of one document: its last
        pair with the :attr:`context_size` sentences before it, the earliest context sentences
        left out where the model's positions would not hold them."""
        src, tgt = document
        if len(src) != len(tgt) or not src:
            raise ValueError(f"{len(src)} source and {len(tgt)} target sentences (need the same number, at least one)")
        k = min(self._context_size, len(src) - 1)
        while True:
            s, t = list(src[len(src) - 1 - k:]), list(tgt[len(tgt) - 1 - k:])
            s_ctx, s_cur = self._joined(s, self.src_sep, self.context_sides in ("src", "both"))
            t_ctx, t_cur = self._joined(t, self.tgt_sep, self.context_sides in ("tgt", "both"))
            (sp, ss), (tp, ts) = self.src_special, self.tgt_special
            source = sp + s_ctx + s_cur + ss
            labels = tp + t_ctx + t_cur + ts
            if k == 0 or max(len(source), len(labels)) <= self.max_positions:
                break
            k -= 1
        scored = t_cur + ts
        return source, [self.start] + labels[:-1], scored

    def score_documents(self, documents: Sequence[TokenDocument]) -> List[SentenceScore]:
        """The last target sentence of every document given its context (see :meth:`row`),
        in batches of similar length (at most :attr:`batch_size` rows and about
        :attr:`max_tokens` padded tokens)."""
        rows = [self.row(d) for d in documents]
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i][1]), len(rows[i][0])))
        out: List[Optional[SentenceScore]] = [None] * len(rows)
        batch: List[int] = []

        def flush():
            if batch:
                lps = forward_logprobs(self.model, [rows[i][0] for i in batch], [rows[i][1] for i in batch],
                                       [rows[i][2] for i in batch], self.src_pad, self.tgt_pad)
                for i, lp in zip(batch, lps):
                    out[i] = SentenceScore(lp)
                batch.clear()

        for i in order:
            width = max([len(rows[j][0]) + len(rows[j][1]) for j in batch + [i]])
            if batch and (len(batch) >= self.batch_size or width * (len(batch) + 1) > self.max_tokens):
                flush()
            batch.append(i)
        flush()
        return out


    @torch.no_grad()
    def translate_documents(self, documents: Sequence[Sequence[str]], beam: int = 4, batch_size: int = 16,
                            max_new_tokens: int = 200) -> List[List[str]]:
        """Every document's sentences translated in document order by ``generate`` (beam
        ``beam``, at most ``max_new_tokens`` tokens a sentence): the K previous source
        sentences joined before each one, and on the target side the model's own K previous
        translations joined as the decoder's prompt (with the tokenizer's target language
        token first where it has one). The sentences no later one reads as context and that
        are not the last of their document are left untranslated (``""``): with source context
        only, just each document's last sentence is translated (what the ctxpro sets score)."""
        tgt_side = self.context_sides in ("tgt", "both") and self._context_size > 0
        out = [[""] * len(d) for d in documents]
        need = [set(range(max(0, len(d) - 1 - (self._context_size if tgt_side else 0)), len(d))) for d in documents]
        hyps = [[None] * len(d) for d in documents]  # target ids of the translations made
        src_ids = [[self.encode_source(x) for x in d] for d in documents]
        longest = max((len(d) for d in documents), default=0)
        tp, ts = self.tgt_special
        for position in range(longest):  # document order: every document's sentence i, then i + 1
            rows = [k for k, d in enumerate(documents) if position < len(d) and position in need[k]]
            for b in range(0, len(rows), batch_size):
                batch = rows[b:b + batch_size]
                sources, prompts = [], []
                for k in batch:
                    lo = max(0, position - self._context_size)
                    s_ctx, s_cur = self._joined(src_ids[k][lo:position + 1], self.src_sep,
                                                self.context_sides in ("src", "both"))
                    sources.append(self.src_special[0] + s_ctx + s_cur + self.src_special[1])
                    prompt = [self.start] + tp
                    if tgt_side:
                        for h in hyps[k][lo:position]:
                            prompt += (h if h is not None else []) + self.tgt_sep
                    prompts.append(prompt)
                for k, ids in zip(batch, self._generate(sources, prompts, beam, max_new_tokens)):
                    hyps[k][position] = ids
                    out[k][position] = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
        return out

    def _generate(self, sources, prompts, beam: int, max_new_tokens: int) -> List[List[int]]:
        """The tokens ``generate`` adds after each row's prompt, up to (not with) EOS; rows
        of one prompt length in one call."""
        device = next(self.model.parameters()).device
        eos = self.model.config.eos_token_id
        groups = {}
        for i, p in enumerate(prompts):
            groups.setdefault(len(p), []).append(i)
        out: List[List[int]] = [[] for _ in prompts]
        for rows in groups.values():
            inp = torch.nn.utils.rnn.pad_sequence([torch.tensor(sources[i]) for i in rows], batch_first=True,
                                                  padding_value=self.src_pad).to(device)
            dec = torch.tensor([prompts[i] for i in rows], dtype=torch.long, device=device)
            gen = self.model.generate(input_ids=inp, attention_mask=inp.ne(self.src_pad).long(),
                                      decoder_input_ids=dec, num_beams=beam, do_sample=False,
                                      max_new_tokens=max_new_tokens, early_stopping=beam > 1)
            for i, seq in zip(rows, gen[:, dec.size(1):].tolist()):
                out[i] = [t for t in seq[:seq.index(eos)] if t != self.tgt_pad] if eos in seq else \
                    [t for t in seq if t != self.tgt_pad]
        return out


def is_export(path: str) -> bool:
    """Whether ``path`` is a folder ``docctx-export transformers`` wrote (its export record)."""
    from ..inference.ctranslate2.record import EXPORT_FILE

    return os.path.isdir(path) and os.path.isfile(os.path.join(path, EXPORT_FILE))


def load_transformers_scorer(path: str, *, data: Optional[str] = None, spm_model: Optional[str] = None,
                             context_size: Optional[int] = None, context_override: bool = False,
                             context_sides: Optional[str] = None, separator: Optional[str] = None,
                             src_lang: Optional[str] = None, tgt_lang: Optional[str] = None, cpu: bool = True,
                             max_tokens: int = 4000, batch_size: int = 64, languages=(None, None)):
    """The scorer of ``path``: :class:`ExportedScorer` for an export of this plugin (its own
    context settings; ``context_size`` other than the export's needs ``context_override``),
    :class:`TransformersScorer` for any other model (``context_size`` default 0,
    ``context_sides`` default ``src``)."""
    if is_export(path):
        for name, value in (("--context-sides", context_sides), ("--context-separator", separator),
                            ("--tokenizer-src-lang", src_lang), ("--tokenizer-tgt-lang", tgt_lang)):
            if value is not None:
                raise UsageError(f"{name}: {path} is an export of docctx-export transformers, which records its "
                                 "own context settings and language tokens")
        from ..hub import from_transformers

        overrides = {}
        if context_size is not None:
            overrides["context_size"] = context_size
        if context_override:
            overrides["context_override"] = True
        return ExportedScorer(from_transformers(path, data=data, spm_model=spm_model, cpu=cpu, **overrides),
                              max_tokens=max_tokens, batch_size=batch_size)
    if data is not None or spm_model is not None:
        raise UsageError(f"--data / --spm-model: {path} is a transformers model with its own tokenizer")
    return TransformersScorer(path, context_size=context_size or 0, context_sides=context_sides or "src",
                              separator=separator, src_lang=src_lang, tgt_lang=tgt_lang, cpu=cpu,
                              max_tokens=max_tokens, batch_size=batch_size, languages=languages)
