"""The transformers engine: a folder ``docctx-export transformers`` wrote, decoded by
``transformers``' own ``generate`` (Wolf et al. 2020, "Transformers: State-of-the-Art Natural
Language Processing") through the same document-order scheduling as the fairseq models (the
task's batches, its store of the model's own previous translations, a segment model's
segments with their sentence checks and counted fallbacks).

The folder's model (``AutoModelForSeq2SeqLM``: FSMT, M2M-100, mBART or BART, whichever
computes the fairseq network exactly) reads the joined tokens of a concatenation model as
the CTranslate2 engine gives them (:class:`~fairseq_docctx.inference.context_rows.ContextRows`):
the source context joined before the sentence, the target context (the model's own previous
translations) and fairseq's decoder start ``</s>`` forced as the decoder's prompt
(``decoder_input_ids``), then any forced first tokens (the target language token), the
translation cut from after them (:class:`TransformersGenerator`). The export record
(``docctx-export.json``) gives the task its settings (K, sides, separator, segment packing),
as for a CTranslate2 export (:func:`~fairseq_docctx.inference.ctranslate2.load.exported_task`).

``transformers`` is imported only when a folder is loaded."""
import copy
import os
from typing import List, Optional

import torch

from ..data import context_batch as cb
from ..data.drafts import DEFAULT_BEAM
from .checkpoint import CheckpointError, checkpoint_sha1
from .context_rows import ContextRows
from .ctranslate2 import ExportError
from .ctranslate2.record import EXPORT_FILE, read_export
from .transformers_export import import_transformers

#: the engine name of an export record this engine reads
ENGINE = "transformers"
#: the weights file of a folder ``docctx-export transformers`` writes
WEIGHTS = "model.safetensors"


def read_transformers_export(path: str, data: Optional[str] = None) -> dict:
    """The export record of a folder ``docctx-export transformers`` wrote, checked: the
    record of this engine, with the task settings the engine decodes with (an export made
    before the record carried them is refused: export again), and the model's
    configuration, weights and (unless ``data`` gives them) dictionaries present."""
    if not os.path.isdir(path):
        raise ExportError(f"--path {path}: not a folder exported by docctx-export transformers (the transformers "
                          "engine reads an exported folder, not a checkpoint)")
    if not os.path.isfile(os.path.join(path, EXPORT_FILE)):
        raise ExportError(f"--path {path}: no {EXPORT_FILE}: not a folder exported by docctx-export transformers "
                          "(a transformers model of another origin has no context settings to decode it with)")
    record = read_export(path, engines=(ENGINE,))
    if "task" not in record:
        raise ExportError(f"--path {path}: its {EXPORT_FILE} does not record the task settings: export the "
                          "checkpoint again with this version of docctx-export transformers")
    names = ["config.json", WEIGHTS]
    if data is None:
        names += [record["dictionaries"][side] for side in ("source", "target")]
    missing = [n for n in names if not os.path.isfile(os.path.join(path, n))]
    if missing:
        raise ExportError(f"--path {path}: {', '.join(missing)} missing: not a whole export of docctx-export "
                          "transformers (export the checkpoint again)")
    return record


def load_hf_model(path: str, cpu: bool = True):
    """The folder's ``AutoModelForSeq2SeqLM`` in evaluation mode, on the CPU (or the GPU
    unless ``cpu``, where there is one)."""
    transformers = import_transformers()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(path)
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"--path {path}: transformers cannot load it ({str(e).splitlines()[0]})") from None
    model.eval()
    # generate fills every setting a call leaves at its default from the model's own
    # generation_config.json (written for a user calling generate: forced_bos_token_id,
    # max_length 200...); the engine sets fairseq's rules on every call, so the model keeps
    # only its token ids
    own = model.generation_config
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id, pad_token_id=own.pad_token_id,
        decoder_start_token_id=own.decoder_start_token_id)
    if not cpu and torch.cuda.is_available():
        model.cuda()
    return model


class _UnknownPenalty:
    """fairseq's ``--unkpen``: ``<unk>``'s log-probability lowered by the penalty at every
    step (a ``transformers`` logits processor; ``generate`` gives beam search the
    log-probabilities, greedy search the logits, whose argmax the same shift moves alike)."""

    def __init__(self, unk: int, penalty: float):
        self.unk, self.penalty = unk, penalty

    def __call__(self, input_ids, scores):
        scores[:, self.unk] -= self.penalty
        return scores


class _RowLimits:
    """fairseq's length limit of every row in one ``generate`` call (a ``transformers`` logits
    processor): the row whose translation has reached its own limit gets EOS only at this step
    (``generate``'s own ``forced_eos_token_id`` forces EOS at the one limit of the call).
    ``last``: per row of the call (each row's ``beam`` copies in turn), the decoder input's
    length at the step that must give EOS."""

    def __init__(self, last: torch.Tensor, eos: int):
        self.last, self.eos = last, eos

    def __call__(self, input_ids, scores):
        hit = self.last.to(scores.device) == input_ids.size(1)
        if hit.any():  # as generate's own forced EOS: every other token -inf, EOS 0
            scores[hit] = float("-inf")
            scores[hit, self.eos] = 0.0
        return scores


class TransformersGenerator(ContextRows):
    """fairseq's generator interface (``generate(models, sample)`` -> one list of hypotheses
    per row, best first, ``tokens`` ending in EOS) over a ``transformers`` model's
    ``generate``.

    Every row is decoded as it would be alone, with fairseq's search rules: ``<pad>`` never
    generated, EOS kept out of the first ``min_len`` tokens (forced tokens counted, as fairseq
    counts them), forced at the row's length limit (:meth:`~ContextRows.limits`: the tokens
    before EOS, forced ones counted), ``--unkpen`` subtracted from ``<unk>`` (``inf``:
    never generated). ``generate`` takes one prompt length per call (the prompts are not
    padded: learned positions count from the first token), so the rows are decoded in groups of
    the same prompt length (target context, start token, forced tokens), each group in one call
    under its longest limit, every row's own limit forced by :class:`_RowLimits`.

    Above beam 1 the search is ``transformers``' beam search (``num_beams`` = ``--beam``,
    ``length_penalty`` = ``--lenpen``, ``early_stopping``: a row ends when ``beam``
    hypotheses have ended, as fairseq's does), not fairseq's: it normalises a hypothesis'
    score by the length of what follows the prompt, so forced tokens are not counted there
    (fairseq counts them), and it refills its beam otherwise; docs/transformers.md gives the
    share of identical translations. A hypothesis' ``score`` is fairseq's: the sum of its
    tokens' log-probabilities after the prompt (EOS included) over its length (forced tokens
    and EOS) to the power ``lenpen``.

    FSMT's ``generate`` runs a prompt of several tokens in one decoder call without the
    causal mask (transformers 5.23.0 builds FSMT's causal mask only for a full forward
    without the cache), so for FSMT the prompt but its last token is run through FSMT's
    decoder with its causal mask in one pass into the cache first (:meth:`_primed_cache`), and
    ``generate`` continues from the last token."""

    def __init__(self, model, src_dict, tgt_dict, sep: Optional[int], beam: int = 5, lenpen: float = 1.0,
                 max_len_a: float = 0.0, max_len_b: int = 200, min_len: int = 1, max_source_positions: int = 1024,
                 max_target_positions: int = 1024, unkpen: float = 0.0):
        super().__init__(src_dict, tgt_dict, sep, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
                         min_len=min_len, max_source_positions=max_source_positions,
                         max_target_positions=max_target_positions)
        self.model = model
        self.beam = int(beam)
        self.unkpen = float(unkpen)
        #: whether the prompt is run into the cache by FSMT's decoder first (:meth:`_primed_cache`)
        self.prime = getattr(model.config, "model_type", None) == "fsmt"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **unused):
        """``prefix_tokens`` ``[B, k]``: the first output tokens of every row, forced as
        fairseq's generator forces them (the target language token of data with language
        tokens): they end the prompt and begin each translation. ``bos_token``: the decoder's
        start token in place of ``</s>``, as fairseq's generator takes it."""
        if constraints is not None:
            raise ValueError("the transformers engine takes no constraints")
        ni = sample["net_input"]
        limits = self.limits(ni["src_tokens"])
        ctx = cb.get_context(ni)
        sources = self.source_ids(ni["src_tokens"], ctx)
        prefixes = self.context_prefix_ids(ctx, limits, len(sources))
        start = self.tgt_dict.eos() if bos_token is None else int(bos_token)
        forced = ([[] for _ in sources] if prefix_tokens is None
                  else self.ids(prefix_tokens.cpu(), self.tgt_dict.pad()))
        prompts = [p + [start] + f for p, f in zip(prefixes, forced)]
        groups = {}
        for i, (prompt, f) in enumerate(zip(prompts, forced)):
            groups.setdefault((len(prompt), len(f)), []).append(i)
        out = [None] * len(sources)
        for (_, n_forced), rows in groups.items():
            hyps = self._generate([sources[i] for i in rows], [prompts[i] for i in rows], n_forced,
                                  [limits[i] for i in rows])
            for i, h in zip(rows, hyps):
                out[i] = h
        return out

    def _generate(self, sources: List[List[int]], prompts: List[List[int]], n_forced: int, limits: List[int]):
        """The hypotheses of rows of one prompt length (``n_forced`` forced tokens at its end)."""
        model, pad, eos = self.model, self.src_dict.pad(), self.tgt_dict.eos()
        device = self.device
        # right-padded: learned positions count from the first token
        input_ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sources], batch_first=True,
                                                    padding_value=pad).to(device)
        mask = input_ids.ne(pad).long()
        encoder_out = model.get_encoder()(input_ids=input_ids, attention_mask=mask, return_dict=True)
        decoder_ids = torch.tensor(prompts, dtype=torch.long, device=device)
        extra = {}
        if self.prime and decoder_ids.size(1) > 1:
            extra["past_key_values"] = self._primed_cache(encoder_out, mask, decoder_ids)
            decoder_ids = decoder_ids[:, -1:]
        # per row, the translation's tokens after the prompt, EOS included
        new = [max(limit - n_forced, 0) + 1 for limit in limits]
        config = self._generation_config(max(new), max(self.min_len - n_forced, 0))
        # each row's own first token as the decoder start: generate then puts none before the prompt
        config.decoder_start_token_id = decoder_ids[:, 0]
        from transformers import LogitsProcessorList

        last = torch.tensor(new).repeat_interleave(self.beam) + decoder_ids.size(1) - 1
        processors = LogitsProcessorList([_RowLimits(last, eos)])
        if 0 < self.unkpen < float("inf"):
            processors.append(_UnknownPenalty(self.tgt_dict.unk(), self.unkpen))
        gen = model.generate(input_ids=input_ids, attention_mask=mask, encoder_outputs=encoder_out,
                             decoder_input_ids=decoder_ids, generation_config=config,
                             logits_processor=processors, **extra)
        scores = model.compute_transition_scores(gen.sequences, gen.scores, getattr(gen, "beam_indices", None),
                                                 normalize_logits=self.beam == 1)
        # the generated tokens: the last ones, one per step (FSMT's primed prompt may come back
        # longer than it was given)
        prompt_len = gen.sequences.size(1) - len(gen.scores)
        out = []
        for row, limit in enumerate(limits):
            forced = prompts[row][len(prompts[row]) - n_forced:] if n_forced else []
            hyps = []
            for k in range(row * self.beam, (row + 1) * self.beam):
                ids = gen.sequences[k, prompt_len:].tolist()
                lp = scores[k].tolist()
                n = next((j + 1 for j, t in enumerate(ids) if t == eos), len(ids))
                ids, lp = ids[:n], lp[:n]
                if not ids or ids[-1] != eos or len(forced) + len(ids) > limit + 1:
                    raise RuntimeError(f"generate went past the length limit {limit} of a row")
                tokens = forced + ids
                positional = [0.0] * len(forced) + lp
                score = sum(lp) / (len(tokens) ** self.lenpen) if tokens else 0.0
                hyps.append({"tokens": torch.tensor(tokens, dtype=torch.long), "score": score, "attention": None,
                             "alignment": None, "positional_scores": torch.tensor(positional)})
            out.append(hyps)
        return out

    def _generation_config(self, max_new: int, min_new: int):
        """``generate``'s settings for one group (at most ``max_new`` tokens after the prompt,
        EOS kept out of the first ``min_new``): fairseq's search rules (see the class)."""
        base = copy.deepcopy(self.model.generation_config)
        suppress = [self.tgt_dict.pad()] + ([self.tgt_dict.unk()] if self.unkpen == float("inf") else [])
        beam = {"early_stopping": True, "length_penalty": self.lenpen} if self.beam > 1 else {
            "early_stopping": False, "length_penalty": 1.0}
        base.update(num_beams=self.beam, num_return_sequences=self.beam, do_sample=False, max_new_tokens=max_new,
                    min_new_tokens=min_new, **beam, eos_token_id=self.tgt_dict.eos(),
                    pad_token_id=self.tgt_dict.pad(), forced_eos_token_id=self.tgt_dict.eos(),
                    suppress_tokens=suppress, output_scores=True, return_dict_in_generate=True, use_cache=True)
        return base

    def _primed_cache(self, encoder_out, mask, decoder_ids):
        """The decoder's cache after the prompt ``decoder_ids`` but its last token (FSMT: see
        the class): one pass of FSMT's decoder with its causal mask over every row's prompt,
        the cache then repeated for the row's ``beam`` copies, as ``generate`` expands the rows
        for its search."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        ids = decoder_ids[:, :-1]
        n = ids.size(1)
        dtype = encoder_out.last_hidden_state.dtype
        causal = torch.triu(torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=ids.device), 1)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.model.model.decoder(ids, encoder_out.last_hidden_state, mask, None, causal, past_key_values=cache,
                                 use_cache=True)
        if self.beam > 1:
            cache.batch_repeat_interleave(self.beam)
        return cache


def transformers_generator(model, task, record: dict, beam: int, **generation) -> TransformersGenerator:
    """The generator of ``task`` with the export ``record``'s positions and ``generation``'s
    search settings (fairseq-generate's defaults where not given: ``max_len_a`` 0,
    ``max_len_b`` 200, ``lenpen`` 1, ``min_len`` 1, ``unkpen`` 0)."""
    sep = getattr(task.cfg, "context_separator", None)
    src_dict = task.source_dictionary
    return TransformersGenerator(
        model, src_dict, task.target_dictionary, src_dict.index(sep) if sep and sep in src_dict.indices else None,
        beam=beam, lenpen=generation.get("lenpen", 1.0), max_len_a=generation.get("max_len_a", 0.0),
        max_len_b=generation.get("max_len_b", 200), min_len=generation.get("min_len", 1),
        unkpen=generation.get("unkpen", 0.0), max_source_positions=record["max_source_positions"],
        max_target_positions=record["max_target_positions"])


def load_transformers_draft_translator(path: str, data_dir: str, beam: int = DEFAULT_BEAM,
                                       cpu: Optional[bool] = None, fp16: bool = False, **generation):
    """:func:`~fairseq_docctx.inference.drafter.load_draft_translator` for a sentence-level
    model exported by ``docctx-export transformers``: the same drafts' interface, decoded by
    ``transformers``."""
    from ..data.drafts import DraftsError
    from .ctranslate2.load import exported_task
    from .drafter import DraftTranslator, check_language_pair

    path = os.fspath(path)
    record = read_transformers_export(path, os.fspath(data_dir))
    if fp16:
        raise DraftsError("--fp16: the transformers engine computes in float32, the type of the export")
    if record["model"] != "transformer":
        raise CheckpointError(f"{path}: {record['model']} reads document context; drafts come from a "
                              "sentence-level model (e.g. transformer)")
    task, model, _ = exported_task(path, record, os.fspath(data_dir))
    check_language_pair(path, (record["source_lang"], record["target_lang"]), data_dir)
    hf = load_hf_model(path, cpu=bool(cpu))
    generator = transformers_generator(hf, task, record, beam, **generation)
    return DraftTranslator(task, model, generator, os.path.abspath(path),
                           checkpoint_sha1(os.path.join(path, WEIGHTS)), int(beam), False, hf.device)
