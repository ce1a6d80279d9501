#!/usr/bin/env python3
"""Turns chat or prompt/completion examples into the JSON lines mtrun --data
reads: one example per line with "input_ids" and "labels" (-100 where the
model is not trained: the prompt, every turn but the assistant's).

  tokenize_jsonl.py IN.jsonl OUT.jsonl --tokenizer PATH [--max-length N]

IN has one example per line, either
  {"messages": [{"role": "user", "content": ...},
                {"role": "assistant", "content": ...}, ...]}
    tokenized with the tokenizer's chat template; each assistant message
    (what the template adds for it) is trained on, the rest not;
  {"prompt": ..., "completion": ...}
    the prompt (with the tokenizer's beginning-of-sequence token, if any)
    not trained on, the completion and an end-of-sequence token trained on.

PATH is a Hugging Face tokenizer: a folder with tokenizer.json (and
tokenizer_config.json with its chat template), read with transformers (or
the tokenizers package, without chat templates); or a SentencePiece
tokenizer.model (prompt/completion only: it has no chat template). Run it in
the venv of scripts/export-venv.sh. Lines longer than --max-length tokens are
truncated (the training's --pad would cut them too).
"""
import argparse
import json
import os
import sys


def fail(where, why):
    sys.exit(f"tokenize_jsonl.py: error: {where}: {why}")


class HuggingFace:
    def __init__(self, path):
        try:
            import transformers
            self.tok = transformers.AutoTokenizer.from_pretrained(path)
            self.fast = None
        except ImportError:  # the tokenizers package alone: no templates
            import tokenizers
            self.tok = None
            self.fast = tokenizers.Tokenizer.from_file(
                os.path.join(path, "tokenizer.json"))

    def encode(self, text):
        if self.tok is not None:
            return self.tok.encode(text, add_special_tokens=False)
        return self.fast.encode(text, add_special_tokens=False).ids

    def bos(self):
        return [self.tok.bos_token_id] if self.tok is not None and \
            self.tok.bos_token_id is not None else []

    def eos(self):
        if self.tok is not None and self.tok.eos_token_id is not None:
            return [self.tok.eos_token_id]
        return []

    def chat(self, messages, where):
        if self.tok is None or not getattr(self.tok, "chat_template", None):
            fail(where, "a chat needs a tokenizer with a chat template "
                        "(transformers and tokenizer_config.json)")
        ids = self.tok.apply_chat_template(messages, tokenize=True,
                                           return_dict=False)
        labels = [-100] * len(ids)
        # Each assistant message: what the template adds for it after the
        # conversation so far (with the prompt for its turn).
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            before = self.tok.apply_chat_template(
                messages[:i], tokenize=True, add_generation_prompt=True,
                return_dict=False)
            through = self.tok.apply_chat_template(
                messages[:i + 1], tokenize=True, return_dict=False)
            if ids[:len(through)] != through or through[:len(before)] != before:
                fail(where, "the chat template does not render a "
                            "conversation as the prefixes of its turns; "
                            "give prompt/completion examples instead")
            labels[len(before):len(through)] = ids[len(before):len(through)]
        return ids, labels


class SentencePiece:
    def __init__(self, path):
        import sentencepiece
        self.sp = sentencepiece.SentencePieceProcessor(model_file=path)

    def encode(self, text):
        return self.sp.encode(text)

    def bos(self):
        return [self.sp.bos_id()] if self.sp.bos_id() >= 0 else []

    def eos(self):
        return [self.sp.eos_id()] if self.sp.eos_id() >= 0 else []

    def chat(self, messages, where):
        fail(where, "a SentencePiece tokenizer.model has no chat template: "
                    "give prompt/completion examples")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--max-length", type=int, default=0)
    args = ap.parse_args()
    tok = SentencePiece(args.tokenizer) if args.tokenizer.endswith(".model") \
        else HuggingFace(args.tokenizer)
    count = trained = 0
    with open(args.input) as src, open(args.output, "w") as out:
        for n, line in enumerate(src, 1):
            if not line.strip():
                continue
            where = f"{args.input}:{n}"
            try:
                example = json.loads(line)
            except json.JSONDecodeError as e:
                fail(where, f"not JSON ({e})")
            if not isinstance(example, dict):
                fail(where, "not a JSON object")
            if "messages" in example:
                ids, labels = tok.chat(example["messages"], where)
            elif "prompt" in example and "completion" in example:
                prompt = tok.bos() + tok.encode(str(example["prompt"]))
                reply = tok.encode(str(example["completion"])) + tok.eos()
                ids = prompt + reply
                labels = [-100] * len(prompt) + reply
            else:
                fail(where, "needs 'messages', or 'prompt' and 'completion'")
            if args.max_length:
                ids, labels = ids[:args.max_length], labels[:args.max_length]
            count += 1
            trained += sum(l != -100 for l in labels)
            out.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
    print(f"tokenize_jsonl.py: {count} examples, {trained} trained tokens -> "
          f"{args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
