"""Running trained models: the one place that does it, for the hub and every command.

:mod:`.checkpoint`: loading a checkpoint and the checks that refuse an unusable one;
:mod:`.drafter`: the sentence-level draft translator; :mod:`.drafts`: ``docctx-drafts``;
:mod:`.translate`: ``docctx-translate`` (one process, a shard, several processes);
:mod:`.generate` and :mod:`.shards`: ``fairseq-generate`` over several processes;
:mod:`.average`: checkpoint averaging; :mod:`.options`: the checks of shared options.
Layers below (``data``, ``models``, ``tasks``) are imported; the hub and the commands are
above and import this package, never the other way round.
"""
