"""Inference over several processes: documents sharded, outputs merged in corpus order
(:mod:`.shards`: the processes; :mod:`.generate`: ``fairseq-generate``;
:mod:`.translate`: ``docctx-translate``)."""
