"""What an exported folder says of its context: the ``docctx`` entry of ``config.json``
(:func:`docctx_metadata`; ``transformers`` keeps a configuration's extra keys, and the
transformers engine reads it) and the model card ``README.md`` (:func:`model_card`).

``config.json``'s ``docctx`` (format 1)::

    {"format": 1, "model": "concat_transformer", "arch": ..., "source_lang": ..., "target_lang": ...,
     "context": {"size": K, "sides": ["src", "tgt"], "separator": "<sep>", "separator_id": 4,
                 "source_context": true, "target_prefix": true},
     "segments": null | {"max_segment_tokens": N, "segment_packing": ..., "constrained": bool},
     "max_source_positions": N, "max_target_positions": N,
     "segmentation": {"kind": "pre-segmented" | "sentencepiece" | "fastbpe" | "subword_nmt" | "none",
                      "file": FILE | null, "moses": bool, "target_tokenizer": SUBFOLDER | null},
     "pretrained": null | the data's pretrained record,
     "language_tokens": null | {"source": "__en__", "target": "__de__", "source_id": N, "target_id": N},
     "checkpoint_sha1": ...}
"""
import re
from typing import Optional

_SPECIAL_SYMBOL = re.compile(r"<[^<>\s]+>")


def docctx_metadata(model, task, name: str, arch: Optional[str], segmentation: dict) -> dict:
    """The ``docctx`` entry of ``config.json`` for ``model`` (the registered model ``name``)."""
    from ...models.document_context import DocumentContextModel
    from ..ctranslate2.record import segment_record

    cfg = task.cfg
    sides = list(getattr(model, "context_sides", ()) if isinstance(model, DocumentContextModel) else ())
    sep = getattr(cfg, "context_separator", None)
    d = task.source_dictionary
    text = getattr(task, "pretrained_text", None)
    return {
        "format": 1, "model": name, "arch": arch,
        "source_lang": cfg.source_lang, "target_lang": cfg.target_lang,
        "context": {"size": int(getattr(cfg, "context_size", 0) or 0) if sides else 0, "sides": sides,
                    "separator": sep, "separator_id": d.index(sep) if sep and sep in d.indices else None,
                    "source_context": "src" in sides, "target_prefix": "tgt" in sides},
        "segments": segment_record(task, model),
        "max_source_positions": int(model.encoder.max_positions()),
        "max_target_positions": int(model.decoder.max_positions()),
        "segmentation": segmentation,
        "pretrained": dict(text.record) if text is not None else None,
    }


#: the example's decoding after the prefix: ``generate``
_GENERATE = '''def decode(enc, prefix):
    # decoder_start_token_id=prefix[0]: else generate puts another </s> before the prefix
    with torch.no_grad():
        gen = model.generate(**enc, decoder_input_ids=torch.tensor([prefix]), decoder_start_token_id=prefix[0],
                             num_beams=1, max_new_tokens=200)
    return gen[0, len(prefix):].tolist()
'''
#: FSMT after a target prefix: a full forward a step (FSMT's generate runs a decoder input of
#: several tokens without the causal mask); fairseq's rules: no <pad>, no </s> first
_LOOP = '''def decode(enc, prefix):
    # FSMT's generate would run the prefix without the causal mask: one full forward a step
    ids = list(prefix)
    with torch.no_grad():
        for _ in range(200):
            logits = model(**enc, decoder_input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            logits[model.config.pad_token_id] = float("-inf")
            if len(ids) == len(prefix):
                logits[model.config.eos_token_id] = float("-inf")
            ids.append(int(logits.argmax()))
            if ids[-1] == model.config.eos_token_id:
                break
    return ids[len(prefix):]
'''

_EXAMPLE = '''```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
import torch

path = "{folder}"
tok = AutoTokenizer.from_pretrained(path){target_tok}
model = AutoModelForSeq2SeqLM.from_pretrained(path).eval()
meta = model.config.docctx
K, sep = meta["context"]["size"], meta["context"]["separator"]

{decode_function}
def translate(document):  # a list of {segmented} sentences, in document order
    out = []
    for j, sentence in enumerate(document):
        src_context = document[max(0, j - K):j] if meta["context"]["source_context"] else []
        source = " ".join(s + " " + sep for s in src_context) + " " + sentence
        enc = tok(source.strip(), return_tensors="pt")  # pieces ... </s>
        enc["input_ids"] = enc["input_ids"][:, -meta["max_source_positions"]:]  # the earliest cut, as fairseq does
        enc["attention_mask"] = enc["attention_mask"][:, -meta["max_source_positions"]:]
        prefix = [model.config.decoder_start_token_id]  # </s>, fairseq's decoder start
        if meta["context"]["target_prefix"]:  # the model's own previous translations
            tgt_context = out[max(0, j - K):j]
            ids = tgt.convert_tokens_to_ids(" ".join(t + " " + sep for t in tgt_context).split())
            prefix = ids + prefix
        new = decode(enc, prefix)  # the prefix cut off again
        out.append(" ".join(tgt.convert_ids_to_tokens([i for i in new if i != model.config.eos_token_id])))
    return out

print(translate([{example_sentences}]))
```'''


def example_sentences(d, n: int = 2, words: int = 4) -> list:
    """``n`` sentences of the dictionary ``d``'s first ordinary symbols (the card's example)."""
    plain = [s for s in d.symbols[d.nspecial:] if not _SPECIAL_SYMBOL.fullmatch(s) and not s.startswith("madeupword")]
    return [" ".join(plain[i * words:(i + 1) * words] or plain[:words]) for i in range(n)]


def model_card(meta: dict, class_name: str, folder_name: str, example: list) -> str:
    """The model card ``README.md`` of an export: what the network is, how the context is
    given, and a runnable example in plain ``transformers`` (``example``: its sentences)."""
    ctx, seg = meta["context"], meta["segmentation"]
    if seg["kind"] == "sentencepiece":
        segmented = ("segmented with the SentencePiece model `{}` of this folder (its pieces joined by spaces: "
                     "`' '.join(sp.encode(text, out_type=str))`)".format(seg["file"]))
    elif seg["kind"] in ("fastbpe", "subword_nmt"):
        segmented = ("{}segmented with the {} codes `{}` of this folder, pieces separated by spaces".format(
            "Moses-tokenized, then " if seg.get("moses") else "", seg["kind"], seg["file"]))
    else:
        segmented = "segmented as the training data was (tokenized, BPE pieces and all), tokens separated by spaces"
    lines = [
        f"# {meta['model']} ({meta['source_lang']}→{meta['target_lang']}), exported by `docctx-export transformers`",
        "",
        f"A `{class_name}` (loads with `AutoModelForSeq2SeqLM`); the network of the fairseq checkpoint "
        f"(architecture `{meta['arch']}`), weights unchanged. The decoder starts with `</s>` (fairseq's "
        "convention) and stops at `</s>`.",
        "",
        "## Input",
        "",
        f"The tokenizer (`AutoTokenizer`) maps text to the fairseq dictionary's ids and appends `</s>`; the text "
        f"is given {segmented}: the tokenizer does not segment raw text itself. A piece outside the dictionary "
        "is `<unk>`.",
    ]
    langtoks = meta.get("language_tokens")
    if langtoks:
        lines += ["", f"Language tokens: every source sentence starts with `{langtoks['source']}`, every target "
                  f"sentence with `{langtoks['target']}` (the context sentences too), as in the training data: give "
                  f"them in the text. `generate` forces `{langtoks['target']}` first after the start `</s>` "
                  "(`forced_bos_token_id`, generation_config.json); after a target prefix put it at the end of the "
                  f"prefix yourself (`... <sep> </s> {langtoks['target']}`) and cut it off with the prefix."]
    if seg.get("target_tokenizer"):
        lines += ["", f"The source and target dictionaries differ: decode the output with "
                  f"`AutoTokenizer.from_pretrained(DIR, subfolder=\"{seg['target_tokenizer']}\")`."]
    lines += ["", "## Context", ""]
    if meta["segments"]:
        s = meta["segments"]
        lines.append(f"A segment model: consecutive sentences of a document joined by `{ctx['separator']}` "
                     f"(`s1 {ctx['separator']} s2 {ctx['separator']} s3`, at most {s['max_segment_tokens']} tokens, "
                     f"{s['segment_packing']} packing) are translated as one sequence; split the output on "
                     f"`{ctx['separator']}`. fairseq's search keeps the sentence count"
                     + (" and the length windows" if s["constrained"] else "")
                     + " of a segment; `generate` does not: check the count, and translate a segment that breaks it "
                     "sentence by sentence.")
    elif ctx["size"]:
        lines.append(f"K = {ctx['size']} previous sentences, sides: {', '.join(ctx['sides'])}; separator "
                     f"`{ctx['separator']}` (id {ctx['separator_id']}).")
        if ctx["source_context"]:
            lines.append(f"* Source: `x_(j-K) {ctx['separator']} ... x_(j-1) {ctx['separator']} x_j </s>`: the "
                         f"previous source sentences (as many as there are, up to K), farthest first; at most "
                         f"{meta['max_source_positions']} tokens, the earliest cut.")
        if ctx["target_prefix"]:
            lines.append(f"* Target: the model's own previous translations `y_(j-K) {ctx['separator']} ... y_(j-1) "
                         f"{ctx['separator']}` followed by `</s>` are the forced decoder prefix "
                         "(`decoder_input_ids`, with `decoder_start_token_id` set to the prefix's first token: "
                         "otherwise `generate` puts another `</s>` before it), cut off the output again. One "
                         "sentence per call (a batch would pad prefixes of different lengths)."
                         + (" FSMT's `generate` runs a decoder input of several tokens without the causal mask "
                            "(transformers 5.23.0 builds FSMT's causal mask only when `input_ids` is given and the "
                            "cache is off): after a prefix, decode with a full forward a step, as the example does."
                            if class_name.startswith("FSMT") else ""))
    else:
        lines.append("A sentence-level model: no context.")
    tgt_tok = (f'\ntgt = AutoTokenizer.from_pretrained(path, subfolder="{seg["target_tokenizer"]}")'
               if seg.get("target_tokenizer") else "\ntgt = tok")
    lines += ["", "## Example", "", _EXAMPLE.format(
        folder=folder_name, target_tok=tgt_tok,
        decode_function=_LOOP if class_name.startswith("FSMT") and ctx["target_prefix"] else _GENERATE,
        segmented="SentencePiece-segmented" if seg["kind"] == "sentencepiece" else "segmented",
        example_sentences=", ".join(repr(s) for s in example)), "",
        "The context settings are in `config.json` under `docctx`.", ""]
    return "\n".join(lines)
