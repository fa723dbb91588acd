"""The data of a training run, from text to the micro-batches of the loop.

- `corpora`: the built-in corpora (a seeded Markov source, the standard library's docstrings).
- `local_files`, `loading`: a corpus as one "text" column, from the Hub or local files (a bad file is
  named with its line and cause).
- `cleaning`: C4's cleaning and deduplication rules (Raffel et al., 2020).
- `splits`: the held-out text (a seeded share of the documents, or the tail of the characters).
- `tokenizer`: the tokenizers a run trains (byte-level BPE, WordPiece, Unigram, characters).
- `packing`: documents tokenized and packed into blocks of `block_size` tokens (GPT-2 style).
- `fingerprint`: what identifies the text read, for a resume to refuse a changed corpus.
- `prepare`: all of the above for one run (`prepare_data`).
- `streaming`: a corpus too large for memory, read through a seeded shuffle buffer.
- `batches`: how the blocks become the loop's micro-batches (`BatchPlan`), the same data order
  for any number of processes.
- `collators_mlm`, `collators_seq2seq`, `seq2seq_noise`: the objectives' noise (BERT's masks,
  T5's corrupted spans, BART's denoising, CMLM's masks).
"""
