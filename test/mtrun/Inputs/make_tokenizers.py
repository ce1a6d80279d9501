#!/usr/bin/env python3
"""Makes the two kinds of tokenizer examples/data/tokenize_jsonl.py reads,
tiny and offline: a Hugging Face one (a word-level tokenizer.json with
<s>, </s> and a chat template) and a SentencePiece tokenizer.model trained
on a few sentences; and chat and prompt/completion examples for them.

  make_tokenizers.py OUT_DIR
"""
import json
import os
import sys

import sentencepiece
import tokenizers
import transformers

out = sys.argv[1]
words = "hello world how are you fine thanks what is two plus three five".split()
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<|user|>": 3, "<|assistant|>": 4}
for w in words:
    vocab.setdefault(w, len(vocab))
model = tokenizers.models.WordLevel(vocab, unk_token="<unk>")
tok = tokenizers.Tokenizer(model)
tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
fast = transformers.PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
    unk_token="<unk>",
    additional_special_tokens=["<|user|>", "<|assistant|>"])
fast.chat_template = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|> "
    "{{ m['content'] }} {% else %}<|assistant|> {{ m['content'] }} </s> "
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|> "
    "{% endif %}")
fast.save_pretrained(os.path.join(out, "hf"))
text = os.path.join(out, "corpus.txt")
with open(text, "w") as f:
    for _ in range(20):
        f.write(" ".join(words) + "\n")
sentencepiece.SentencePieceTrainer.train(
    input=text, model_prefix=os.path.join(out, "sp"), vocab_size=16,
    model_type="word", bos_id=1, eos_id=2, unk_id=0, pad_id=-1)
with open(os.path.join(out, "chat.jsonl"), "w") as f:
    for _ in range(8):
        f.write(json.dumps({"messages": [
            {"role": "user", "content": "what is two plus three"},
            {"role": "assistant", "content": "five"},
            {"role": "user", "content": "how are you"},
            {"role": "assistant", "content": "fine thanks"}]}) + "\n")
with open(os.path.join(out, "pc.jsonl"), "w") as f:
    for _ in range(8):
        f.write(json.dumps({"prompt": "hello world how are you",
                            "completion": "fine thanks"}) + "\n")
