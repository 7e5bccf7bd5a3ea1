"""Run by tests/test_hf_export.py in a subprocess: an exported transformers folder used with
plain transformers in a process where ``fairseq_docctx`` (and fairseq) cannot be imported.

``python hf_isolated.py REQUEST.json RESULT.json``; the request holds ``folder`` and
``jobs``, each one of:

* ``{"encode": [text, ...]}`` -> the ids ``AutoTokenizer`` gives each text (``</s>`` appended);
* ``{"logits": [[input_ids, decoder_input_ids], ...]}`` -> each pair's logits (one row per
  decoder input token), each pair alone, no padding;
* ``{"batch_logits": [[input_ids, decoder_input_ids], ...]}`` -> the same run as one batch,
  padded on the right with attention masks;
* ``{"generate": [[input_ids, decoder_input_ids], ...], "max_new_tokens": N}`` -> greedy
  ``generate`` (num_beams 1) after the decoder prefix (``decoder_start_token_id`` its first
  token, as the model card says), the new tokens only (with ``"step_logits": true``: ``[tokens,
  the raw logits of every step]``);
* ``{"greedy_loop": [[input_ids, decoder_input_ids], ...], "max_new_tokens": N}`` -> the model
  card's greedy loop for FSMT after a target prefix (a full forward a step, ``use_cache=False``):
  ``[tokens, the raw logits of every step]``;
* ``{"decode": [ids, ...]}`` -> the tokenizer's text of each.
"""
import importlib.abc
import json
import sys


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fairseq_docctx", "fairseq"):
            raise ImportError(f"{name} is blocked in this process")
        return None


sys.meta_path.insert(0, _Blocked())
sys.path = [p for p in sys.path if "wt-" not in p and not p.endswith("/tests")]


def main(request_path, result_path):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    torch.set_num_threads(1)
    try:
        import fairseq_docctx  # noqa: F401
        raise AssertionError("fairseq_docctx is importable")
    except ImportError:
        pass
    with open(request_path) as f:
        request = json.load(f)
    folder = request["folder"]
    tok = AutoTokenizer.from_pretrained(folder, **request.get("tokenizer_kwargs", {}))
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    out = {"class": type(model).__name__, "tokenizer_class": type(tok).__name__, "results": []}
    pad = model.config.pad_token_id
    with torch.no_grad():
        for job in request["jobs"]:
            if "encode" in job:
                out["results"].append([tok(t)["input_ids"] for t in job["encode"]])
            elif "decode" in job:
                out["results"].append([tok.decode(ids) for ids in job["decode"]])
            elif "logits" in job:
                out["results"].append([model(input_ids=torch.tensor([s]), decoder_input_ids=torch.tensor([p]))
                                       .logits[0].tolist() for s, p in job["logits"]])
            elif "greedy_loop" in job:
                res = []
                for s, p in job["greedy_loop"]:
                    ids, steps = list(p), []
                    for _ in range(job["max_new_tokens"]):
                        logits = model(input_ids=torch.tensor([s]), decoder_input_ids=torch.tensor([ids]),
                                       use_cache=False).logits[0, -1]
                        steps.append(logits.tolist())
                        logits[pad] = float("-inf")
                        if len(ids) == len(p):
                            logits[model.config.eos_token_id] = float("-inf")
                        ids.append(int(logits.argmax()))
                        if ids[-1] == model.config.eos_token_id:
                            break
                    res.append([ids[len(p):], steps])
                out["results"].append(res)
            elif "batch_logits" in job:
                pairs = job["batch_logits"]
                width = max(len(s) for s, _ in pairs), max(len(p) for _, p in pairs)
                src = torch.tensor([s + [pad] * (width[0] - len(s)) for s, _ in pairs])
                prev = torch.tensor([p + [pad] * (width[1] - len(p)) for _, p in pairs])
                logits = model(input_ids=src, attention_mask=src.ne(pad).long(), decoder_input_ids=prev,
                               decoder_attention_mask=prev.ne(pad).long()).logits
                out["results"].append([logits[i, :len(p)].tolist() for i, (_, p) in enumerate(pairs)])
            else:
                res = []
                for s, p in job["generate"]:
                    # decoder_start_token_id: the prefix's own first token, else generate puts </s> before it
                    gen = model.generate(input_ids=torch.tensor([s]), decoder_input_ids=torch.tensor([p]),
                                         decoder_start_token_id=p[0], num_beams=1, do_sample=False,
                                         max_new_tokens=job["max_new_tokens"], output_logits=True,
                                         return_dict_in_generate=True)
                    new = gen.sequences[0, len(p):].tolist()
                    res.append([new, [step[0].tolist() for step in gen.logits]] if job.get("step_logits") else new)
                out["results"].append(res)
    with open(result_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
