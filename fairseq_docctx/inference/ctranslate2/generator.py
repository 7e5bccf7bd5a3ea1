"""fairseq's beam search over a ``ctranslate2.Translator``: :class:`CTranslate2Generator`,
the generator the task's batches are decoded with through the CTranslate2 engine (document
order, the model's own previous translations as target context, a segment model's segments),
and the drafts' generator (:func:`draft_generator`)."""
import math
from typing import List, Optional

import torch

from ...data import context_batch as cb
from ..context_rows import ContextRows
from .spec import vocabulary


class CTranslate2Generator(ContextRows):
    """fairseq's generator interface (``generate(models, sample)`` -> one list of hypotheses
    per row, best first, ``tokens`` ending in EOS) over a ``ctranslate2.Translator``, running
    fairseq's beam search (``fairseq.sequence_generator.SequenceGenerator``).

    The rows' context (``net_input["context"]``, as the task collates it, with the model's
    own translations on the target side in document order) is joined as the model's encoder
    joins it (:class:`~fairseq_docctx.inference.context_rows.ContextRows`). Every row is decoded as it would be alone: its length limit is
    ``max_len_a * n + max_len_b`` tokens before EOS, ``n`` its own source sentence's tokens
    (EOS included), whatever its neighbours in the batch; at least ``min_len`` tokens; EOS is
    forced at the limit. The search is fairseq's: the same ``2 * beam`` candidates per step,
    hypotheses ending in EOS among the first ``beam`` set aside and the beam refilled from the
    others, a sentence ended when ``beam`` hypotheses have ended (CTranslate2's rule with a
    length penalty other than 0 and patience 1; with a length penalty of 0 it also waits for
    a step whose best candidate ends, searching on past fairseq's end), the first step after a
    target prefix (the target context, a forced language token) ending the empty translation
    where fairseq's does (CTranslate2's own search ends only its best candidate there), and the
    ended hypotheses ranked as fairseq ranks them (:meth:`_search`).

    ``prefix`` (:data:`~fairseq_docctx.inference.ctranslate2.PREFIX_MODES`, ``--ct2-prefix``,
    checked where it is given): how a row with a target prefix (the target context) is
    decoded. ``stepwise`` (the default) is the search above: CTranslate2's ``translate_batch``
    forces the prefix one step at a time on every beam. ``one-pass`` and
    ``one-pass-beam`` use CTranslate2's ``return_alternatives`` search (:meth:`_one_pass`),
    which runs the prefix through the decoder in one call and then searches each row alone:
    ``one-pass`` takes the ``beam`` best first tokens after the prefix and continues each
    greedily, the best of them by fairseq's ranking is the translation; ``one-pass-beam``
    takes the best first token and continues it with CTranslate2's beam search of ``beam``.
    Both are greedy search at beam 1 (the same translations as ``stepwise``), and another
    search than fairseq's beam search above it. Rows without a prefix (a document's first
    sentence, a sentence-level model) are decoded ``stepwise`` in every mode."""

    def __init__(self, translator, src_dict, tgt_dict, sep: Optional[int], beam: int = 5,
                 lenpen: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 200, min_len: int = 1,
                 max_source_positions: int = 1024, max_target_positions: int = 1024,
                 unkpen: float = 0.0, max_batch_size: int = 0, prefix: str = "stepwise"):
        super().__init__(src_dict, tgt_dict, sep, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
                         min_len=min_len, max_source_positions=max_source_positions,
                         max_target_positions=max_target_positions)
        self.prefix = prefix
        self.translator = translator
        self.beam = int(beam)
        self.disable_unk = unkpen == float("inf")
        self.src_words = vocabulary(src_dict)
        self.tgt_words = vocabulary(tgt_dict)
        self.tgt_index = {w: i for i, w in enumerate(self.tgt_words)}
        self.eos_word = self.tgt_words[tgt_dict.eos()]
        #: the decoder's start token of the search under way (fairseq's </s>, or its ``bos_token``)
        self.start_word = self.eos_word
        # CTranslate2's length penalty: fairseq's, or one too small to change a float32
        # score where fairseq's is 0 (CTranslate2's stopping rule needs one other than 0)
        self.ct2_lenpen = self.lenpen if self.lenpen != 0 else 1e-12

    @staticmethod
    def _words(rows: List[List[int]], words: List[str]) -> List[List[str]]:
        return [[words[i] for i in row] for row in rows]

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **unused):
        """``prefix_tokens`` ``[B, k]``: the first output tokens of every row, forced as
        fairseq's generator forces them (the target language token of data with language
        tokens): they are the first tokens of each translation, scored and counted in its
        length and limit. ``bos_token``: the decoder's start token in place of ``</s>``, as
        fairseq's generator takes it (mBART-25's target language token)."""
        self.start_word = self.tgt_words[bos_token] if bos_token is not None else self.eos_word
        if constraints is not None:
            raise ValueError("the ctranslate2 engine takes no constraints")
        ni = sample["net_input"]
        limits = self.limits(ni["src_tokens"])
        ctx = cb.get_context(ni)
        sources = self._words(self.source_ids(ni["src_tokens"], ctx), self.src_words)
        prefixes = self._words(self.context_prefix_ids(ctx, limits, len(sources)), self.tgt_words)
        # the target prefix: the context, then fairseq's start token; CTranslate2 takes its
        # first token as the decoder's start and returns the rest before the translation
        targets = [p + [self.start_word] for p in prefixes]
        forced = [[] for _ in sources]
        if prefix_tokens is not None:
            forced = self._words(self.ids(prefix_tokens.cpu(), self.tgt_dict.pad()), self.tgt_words)
        best = self._search(sources, targets, [len(p) for p in prefixes], limits, forced)
        return [[{"tokens": torch.tensor(ids, dtype=torch.long), "score": score, "attention": None,
                  "alignment": None, "positional_scores": torch.zeros(len(ids))}]
                for ids, score in best]

    def _search(self, sources, targets, cut: List[int], limits: List[int], forced=None):
        """The best translation ``(token ids ending in EOS, score)`` of every row, ranked as
        fairseq ranks finished hypotheses: the sum of the translation's log-probabilities
        (EOS included) over its length (EOS included) to the power ``lenpen``.

        CTranslate2 normalises by the length of the returned prefix and translation, so the
        hypotheses are ranked here (:meth:`_finished` returns each row's ``beam`` best).
        Where CTranslate2 keeps EOS out of the first free step (:meth:`_first_step`), it
        renormalises that step's probabilities over the other tokens, which fairseq does not:
        every hypothesis of the row gains ``-log(1 - p(EOS))``, taken off again (``p(EOS)``
        scored by CTranslate2; needed only where the ranking depends on it). A translation
        cut at the length limit is scored again, ending in EOS, as fairseq ends and scores it.

        ``forced``: per row, the words forced first in its translation (fairseq's
        ``prefix_tokens``), given to CTranslate2 at the end of the target prefix; CTranslate2
        returns them as the translation's first tokens, and their log-probabilities, which
        fairseq counts in the score and CTranslate2 does not, are added (scored once per row).

        After a target prefix, CTranslate2's beam search lets EOS end only the best candidate
        of the first free step (it drops EOS from the others, ``update_sample_with_prefix`` in
        its ``decoding.cc``), where fairseq's beam search ends every hypothesis of the step's
        ``beam`` best candidates that ends in EOS, and counts it among the ``beam`` it waits
        for: the empty translation (the forced words alone, or nothing after the target
        context at a minimum length of 0). Above beam 1 the engine keeps EOS out of that
        step in CTranslate2's search, finds whether fairseq ends the empty translation there
        (:meth:`_ends_empty`), and then searches the row to ``beam - 1`` finished hypotheses
        (patience ``(beam - 1) / beam``) and adds the empty translation with fairseq's score:
        the same candidates at every step, the same end and ranking as fairseq's."""
        forced = forced or [[] for _ in sources]
        starts, targets = targets, [t + f for t, f in zip(targets, forced)]
        one_pass = [self.prefix != "stepwise" and c > 0 for c in cut]
        first = [self._first_step(len(t) - 1, len(f), one) for t, f, one in zip(targets, forced, one_pass)]
        extra, eos_lp = self._prefix_scores(sources, targets, forced, first)
        empty = self._ends_empty(sources, targets, [i for i, f in enumerate(first) if f[2]], eos_lp)
        rows = self._finished(sources, targets, cut, limits, one_pass, first, empty)
        for i in range(len(rows)):
            if extra[i]:
                rows[i] = [(ids, score + extra[i], again) for ids, score, again in rows[i]]
        self._score_cut(sources, starts, rows)
        # fairseq's empty translation, ended at the first free step: exact
        forced_ids = [[self.tgt_index[w] for w in f] for f in forced]
        for i in empty:
            rows[i].append((forced_ids[i], extra[i] + eos_lp[i], True))
        return self._rank(sources, targets, rows, first, eos_lp)

    def _prefix_scores(self, sources, targets, forced, first):
        """Per row, the log-probabilities of its forced words (summed; 0 without) and of EOS
        at its first free step (``None`` where not needed), scored once by CTranslate2."""
        extra, eos_lp = [0.0] * len(sources), [None] * len(sources)
        scored_rows = [i for i, f in enumerate(forced) if f or first[i][2]]
        if scored_rows:
            scored = self.translator.score_batch([sources[i] for i in scored_rows],
                                                 [targets[i] for i in scored_rows], max_input_length=0)
            for i, r in zip(scored_rows, scored):  # the last token scored: EOS right after the prefix
                extra[i] = float(sum(r.log_probs[-(len(forced[i]) + 1):-1]))
                eos_lp[i] = float(r.log_probs[-1])
        return extra, eos_lp

    def _score_cut(self, sources, starts, rows) -> None:
        """The translations of ``rows`` cut at the length limit scored again in place, ending
        in EOS, as fairseq ends and scores them there (``starts``: the rows' target prefixes)."""
        cut_hyps = [(i, j) for i, hyps in enumerate(rows) for j, h in enumerate(hyps) if h[2]]
        if cut_hyps:
            scored = self.translator.score_batch(
                [sources[i] for i, _ in cut_hyps],
                [starts[i] + [self.tgt_words[t] for t in rows[i][j][0]] for i, j in cut_hyps],
                max_input_length=0)
            for (i, j), r in zip(cut_hyps, scored):
                ids = rows[i][j][0]
                rows[i][j] = (ids, float(sum(r.log_probs[-(len(ids) + 1):])), True)

    def _rank(self, sources, targets, rows, first, eos_lp):
        """Every row's best hypothesis ``(token ids ending in EOS, fairseq's score)`` by
        fairseq's ranking, the renormalisation of a first free step that kept EOS out taken
        off the hypotheses CTranslate2 scored (``p(EOS)`` scored where it is not yet known)."""
        # the ranking depends on the renormalisation where the hypotheses' lengths differ
        # (and it is normalised) or some were scored again
        need = [i for i, hyps in enumerate(rows)
                if first[i][1] and len({(len(h[0]) if self.lenpen != 0 else 0, h[2]) for h in hyps}) > 1]
        missing = [i for i in need if eos_lp[i] is None]
        if missing:
            scored = self.translator.score_batch([sources[i] for i in missing], [targets[i] for i in missing],
                                                 max_input_length=0)
            for i, r in zip(missing, scored):
                eos_lp[i] = float(r.log_probs[-1])
        offset = [0.0] * len(rows)
        for i in need:
            offset[i] = -math.log1p(-math.exp(min(eos_lp[i], -1e-12)))
        out = []
        for hyps, c in zip(rows, offset):
            fairseq_scores = [score if exact else score - c for _, score, exact in hyps]
            key = [f / (len(ids) + 1) ** self.lenpen for f, (ids, _, _) in zip(fairseq_scores, hyps)]
            best = max(range(len(hyps)), key=key.__getitem__)
            out.append((hyps[best][0] + [self.tgt_dict.eos()], fairseq_scores[best]))
        return out

    def _first_step(self, prefix: int, forced: int, one_pass: bool):
        """How CTranslate2's search treats EOS at a row's first free step (the first after
        its target prefix less the start token, ``prefix`` tokens, ``forced`` of them forced
        words): ``(least, renormalised, empty)``. ``least``: CTranslate2's minimum length
        (counted with the prefix); ``renormalised``: whether EOS is kept out of the step, its
        probabilities renormalised over the other tokens; ``empty``: whether fairseq lets EOS
        end its candidates there, with a target prefix above beam 1, which the engine then
        decides itself (:meth:`_search`). Fairseq keeps EOS out of its first ``min_len``
        steps, the forced words counted; CTranslate2 (``min_len`` above one) of its first
        ``least`` steps, the prefix counted. After a prefix, EOS is kept out of the first
        free step by suppressing the sequence of the start token, the forced words and EOS
        (:meth:`_suppressed`), and, where the prefix is the forced words alone, by ``least``.
        A row decoded in one pass (:meth:`_one_pass`) keeps EOS out of its first free step
        whatever the minimum length."""
        if one_pass:
            return 0, True, False
        cut = prefix - forced
        blocked = prefix > 0 and (self.beam > 1 or forced < self.min_len)
        if self.min_len > 1:  # searched apart per prefix length
            least = cut + max(self.min_len, forced + 1 if blocked else 0)
        else:
            least = forced + 1 if blocked else self.min_len
        return least, blocked or (prefix == 0 and self.min_len > 0), blocked and forced >= self.min_len

    def _suppressed(self, targets, cut: List[int], rows: List[int]) -> Optional[List[List[str]]]:
        """CTranslate2's ``suppress_sequences`` that keep EOS out of the first free step of
        ``rows``: the start token, the row's forced words (the end of its target prefix) and
        EOS. CTranslate2 matches a sequence against the tokens after the decoder's first, so
        it applies after a target context; the start token is followed by the forced words
        only there (``</s>`` ends a translation), so no later step is affected. A row whose
        prefix is the forced words alone keeps EOS out by its minimum length instead
        (:meth:`_first_step`), a row without a prefix by ``min_len`` (the sequence is then
        never matched)."""
        found = []
        for i in rows:
            seq = targets[i][cut[i]:] + [self.eos_word]
            if seq not in found:
                found.append(seq)
        return found or None

    def _ends_empty(self, sources, targets, rows: List[int], eos_lp) -> set:
        """The rows (of ``rows``) whose first free step fairseq's beam search ends with EOS:
        EOS among the step's ``beam`` best candidates. CTranslate2's ``return_alternatives``
        gives the step's ``beam`` best other tokens (their probabilities renormalised without
        EOS), compared with ``p(EOS)`` (``eos_lp``); rows of one prefix length share a call,
        which ends at that step."""
        groups, ends = {}, set()
        for i in rows:
            groups.setdefault(len(targets[i]), []).append(i)
        for length, group in groups.items():
            results = self.translator.translate_batch(
                [sources[i] for i in group], target_prefix=[targets[i] for i in group], beam_size=1,
                num_hypotheses=self.beam, return_alternatives=True, max_decoding_length=length,
                min_decoding_length=0, return_scores=True, disable_unk=self.disable_unk, max_input_length=0)
            for i, r in zip(group, results):
                if len(r.scores) < self.beam:
                    ends.add(i)
                    continue
                # the beam-th best other token's log-probability, without the renormalisation
                kth = float(r.scores[self.beam - 1]) + math.log1p(-math.exp(min(eos_lp[i], -1e-12)))
                if eos_lp[i] > kth:
                    ends.add(i)
        return ends

    def _finished(self, sources, targets, cut: List[int], limits: List[int], one_pass: List[bool],
                  first: List[tuple], empty: set):
        """Every row's finished hypotheses ``[(token ids without EOS, unnormalised score, to
        be scored again ending in EOS)]``, each row searched as it is alone: the ``beam`` best
        of a search that ends before the row's length limit, all those a search that reaches
        the limit ends with.

        CTranslate2 takes one length limit per call, counted with the prefix: a row's own is
        its prefix, its limit and one step more, where fairseq forces EOS (a translation going
        on there is cut at the limit and scored again ending in EOS, :meth:`_search`). The
        rows are searched together under the longest of their limits; a search that ends
        before its row's own limit is the same as alone. Greedy search cut at the limit is
        its search alone. A beam search that reaches its row's limit is searched again with
        the rows of the same limit, twice, with patience 2 and twice ``beam`` hypotheses
        returned (the same search: it ends at the limit either way; nothing that ended
        before is left out for the last step's hypotheses): to the step where fairseq forces
        EOS, and to the step before, whose last step returns the hypotheses of fairseq's beam
        at the limit (all of them unless some of that step's ``beam`` best candidates end
        there: fairseq then refills the beam with candidates CTranslate2 returns only where
        one of their continuations is among the next step's ``beam`` best).

        ``first``: per row, how its first free step treats EOS (:meth:`_first_step`: the
        minimum length, counted from the first token of the prefix; rows of one minimum
        length share a call); ``empty``: the rows whose search has ended the empty translation
        at that step (:meth:`_ends_empty`), searched to ``beam - 1`` finished hypotheses (the
        search after the step is the same). ``one_pass``: per row, whether it is decoded in
        one pass (:meth:`_one_pass`) rather than by the search above."""
        own = [c + n + 1 for c, n in zip(cut, limits)]
        out = [None] * len(sources)
        single = [i for i, one in enumerate(one_pass) if one]
        if single:
            for i, hyps in zip(single, self._one_pass(sources, targets, cut, single, own)):
                out[i] = hyps
        groups = {}
        for i in range(len(sources)):
            if not one_pass[i]:
                patience = (self.beam - 1) / self.beam if i in empty else 1.0
                groups.setdefault((first[i][0], patience), []).append(i)
        again = {}
        for (least, patience), rows in groups.items():
            longest = max(own[i] for i in rows)
            keep_out = [i for i in rows if first[i][1]]
            for i, hyps in zip(rows, self._translate(sources, targets, cut, rows, longest, least, keep_out,
                                                     patience)):
                if self.beam > 1 and max((len(ids) for ids, _, _ in hyps), default=0) >= limits[i]:
                    again.setdefault((least, own[i]), []).append(i)
                else:
                    out[i] = hyps
        for (least, longest), rows in again.items():
            keep_out = [i for i in rows if first[i][1]]
            to_eos = self._translate(sources, targets, cut, rows, longest, least, keep_out, patience=2)
            to_limit = (self._translate(sources, targets, cut, rows, longest - 1, least, keep_out, patience=2)
                        if longest - 1 >= least else [[] for _ in rows])
            for i, a, b in zip(rows, to_eos, to_limit):
                out[i] = a + b
        rows = []
        for hyps, n in zip(out, limits):
            seen = {}
            for ids, score, ended in sorted(hyps, key=lambda h: not h[2]):  # ended ones first
                key = tuple(ids[:n])
                if key not in seen:  # (ids, score, whether to be scored again ending in EOS)
                    seen[key] = (list(key), score, not ended or len(ids) > n)
            rows.append(list(seen.values()))
        return rows

    def _one_pass(self, sources, targets, cut: List[int], rows: List[int], own: List[int]):
        """The hypotheses of ``rows`` (as :meth:`_translate` gives them) decoded by CTranslate2's
        ``return_alternatives`` search: the target prefix run through the decoder in one call
        (not one step at a time on every beam), then the first free position expanded to its
        best tokens (EOS kept out, the step's probabilities renormalised over the others, as
        the stepwise search's first step), then each of them continued alone. ``one-pass``:
        ``beam`` first tokens, each continued greedily (CTranslate2's length penalty 0: the
        score returned is the sum of the log-probabilities); ``one-pass-beam``: the best first
        token, continued by CTranslate2's beam search of ``beam`` with its length penalty over
        the continuation's length (the score returned is the first token's log-probability plus
        the continuation's normalised score, not fairseq's; the only hypothesis is not ranked).

        CTranslate2 decodes the rows of a call one at a time in this search, so they gain
        nothing from sharing a call's length limit: the rows are searched in groups of the same
        own length limit (``own``: the prefix, the limit and the step where fairseq forces EOS)
        and minimum length, each under its own limit."""
        alternatives, beam = (self.beam, 1) if self.prefix == "one-pass" else (1, self.beam)
        groups = {}
        for i in rows:
            # the first free step keeps EOS out; a minimum length above one counts the rest
            # from the prefix's first token
            least = cut[i] + self.min_len if self.min_len > 1 else 0
            groups.setdefault((own[i], least), []).append(i)
        eos = self.tgt_dict.eos()
        found = {}
        for (max_length, least), group in groups.items():
            results = self.translator.translate_batch(
                [sources[i] for i in group], target_prefix=[targets[i] for i in group], beam_size=beam,
                num_hypotheses=alternatives, return_alternatives=True,
                length_penalty=self.ct2_lenpen if beam > 1 else 0.0, max_decoding_length=max_length,
                min_decoding_length=least, return_scores=True, return_end_token=True,
                disable_unk=self.disable_unk, max_input_length=0)
            for i, r in zip(group, results):
                hyps = []
                for words, score in zip(r.hypotheses, r.scores):
                    ids = [self.tgt_index[w] for w in words[cut[i]:]]
                    ended = bool(ids) and ids[-1] == eos
                    hyps.append((ids[:-1] if ended else ids, float(score), ended))
                found[i] = hyps
        return [found[i] for i in rows]

    def _translate(self, sources, targets, cut: List[int], rows: List[int], max_length: int, least: int,
                   keep_out: List[int], patience: float = 1):
        """CTranslate2's ``patience * beam`` best hypotheses ``[(token ids without EOS,
        unnormalised score, whether it ended with EOS)]`` of ``rows``, searched under one
        length limit ``max_length`` and one minimum length ``least`` (prefix included), EOS
        kept out of the first free step of the rows ``keep_out`` (:meth:`_suppressed`)."""
        results = self.translator.translate_batch(
            [sources[i] for i in rows], target_prefix=[targets[i] for i in rows], beam_size=self.beam,
            patience=float(patience), num_hypotheses=int(round(self.beam * patience)),
            length_penalty=self.ct2_lenpen, max_decoding_length=max_length, min_decoding_length=least,
            suppress_sequences=self._suppressed(targets, cut, keep_out),
            return_scores=True, return_end_token=True, disable_unk=self.disable_unk, max_input_length=0,
        )
        eos = self.tgt_dict.eos()
        out = []
        for i, r in zip(rows, results):
            hyps = []
            for words, score in zip(r.hypotheses, r.scores):
                # CTranslate2's score is divided by the hypothesis' length (prefix and EOS
                # included) to the power of its length penalty
                raw = float(score) * float(len(words)) ** self.ct2_lenpen
                ids = [self.tgt_index[w] for w in words[cut[i]:]]
                ended = bool(ids) and ids[-1] == eos
                hyps.append((ids[:-1] if ended else ids, raw, ended))
            out.append(hyps)
        return out


def draft_generator(translator, task, record: dict, beam: int, **generation) -> CTranslate2Generator:
    """The generator of sentence-level drafts (fairseq-generate's defaults unless
    ``generation`` says: ``max_len_a`` 0, ``max_len_b`` 200, ``lenpen`` 1)."""
    return CTranslate2Generator(
        translator, task.source_dictionary, task.target_dictionary, None, beam=beam,
        lenpen=generation.get("lenpen", 1.0), max_len_a=generation.get("max_len_a", 0.0),
        max_len_b=generation.get("max_len_b", 200), min_len=generation.get("min_len", 1),
        max_source_positions=record["max_source_positions"],
        max_target_positions=record["max_target_positions"], unkpen=generation.get("unkpen", 0.0))

