"""The sweep's character-level model (protocol §7) and what it reads.

* :mod:`.spec`      — :class:`~.spec.ModelSpec`, every option of the model in one object
* :mod:`.model`     — the model (:class:`~.model.CharLM`) and its parameter count
* :mod:`.stack`     — many models of one parameter shape as one (:class:`~.stack.StackedCharLM`)
* :mod:`.loop`      — the one training loop of a stack (:class:`~.loop.Trainer`), both sweeps'
* :mod:`.corpus`    — the character corpus, and the windows a job reads from it
* :mod:`.vocab`     — a vocabulary's name and what it means (no tokenizer library)
* :mod:`.tokenizer` — the corpus's vocabularies (characters, byte-level BPE), bits per character

What is trained, and on what, is :mod:`headwatch.sweep` (its settings :mod:`headwatch.settings.sweep`) and
:mod:`headwatch.induction`.
"""
