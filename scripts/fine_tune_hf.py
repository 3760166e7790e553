"""Fine-tunes an `xlnet-jax export-hf` directory on a small text classification task.

Usage:
  python scripts/fine_tune_hf.py EXPORT_DIR TRAIN.tsv [EVAL.tsv] [--steps N] [--batch_size B]
      [--learning_rate LR] [--max_length L] [--out DIR]

Each line of a .tsv file is `LABEL<TAB>TEXT`, with labels 0 to K-1. The export is loaded as
`transformers.XLNetForSequenceClassification` (its classification head starts random) and
its tokenizer with `AutoTokenizer`; training is plain AdamW on shuffled batches, printing
the loss every 10 steps, then the accuracy on EVAL.tsv. Needs the hf extra (torch,
transformers): `pip install -e ".[hf]"`.
"""

import argparse
import random
import sys
from collections.abc import Callable, Sequence

import torch
import transformers


def read_task(path: str) -> tuple[list[str], list[int]]:
    """(texts, labels) of a `LABEL<TAB>TEXT` file; a malformed line stops with its number."""
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            label, tab, text = line.rstrip("\n").partition("\t")
            if not tab or not label.isdigit():
                sys.exit(f"{path}:{number}: expected LABEL<TAB>TEXT with LABEL 0, 1, ...")
            texts.append(text)
            labels.append(int(label))
    return texts, labels


def _batch(tokenizer, texts: Sequence[str], max_length: int) -> dict:
    return tokenizer(
        list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt"
    )


def fine_tune(
    model_dir: str,
    texts: Sequence[str],
    labels: Sequence[int],
    *,
    steps: int = 1000,
    batch_size: int = 16,
    learning_rate: float = 2e-5,
    max_length: int = 128,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> tuple[transformers.XLNetForSequenceClassification, list[float]]:
    """Trains the export at `model_dir` on (texts, labels); returns the model and each
    step's training loss. The dropout the export's config.json holds is on while training."""
    torch.manual_seed(seed)
    order = random.Random(seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.XLNetForSequenceClassification.from_pretrained(
        model_dir, num_labels=max(labels) + 1
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses, indices = [], []
    for step in range(1, steps + 1):
        if len(indices) < batch_size:
            indices += order.sample(range(len(texts)), len(texts))
        chosen, indices = indices[:batch_size], indices[batch_size:]
        inputs = _batch(tokenizer, [texts[i] for i in chosen], max_length)
        loss = model(**inputs, labels=torch.tensor([labels[i] for i in chosen])).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0:
            log(f"step {step}: loss {sum(losses[-10:]) / 10:.4f} (mean of the last 10)")
    return model, losses


@torch.no_grad()
def accuracy(
    model_dir: str,
    model: transformers.XLNetForSequenceClassification,
    texts: Sequence[str],
    labels: Sequence[int],
    *,
    batch_size: int = 64,
    max_length: int = 128,
) -> float:
    """The share of (texts, labels) that `model` (dropout off) classifies right."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model.eval()
    right = 0
    for start in range(0, len(texts), batch_size):
        inputs = _batch(tokenizer, texts[start : start + batch_size], max_length)
        predicted = model(**inputs).logits.argmax(-1).tolist()
        right += sum(
            p == y for p, y in zip(predicted, labels[start : start + batch_size], strict=True)
        )
    return right / len(texts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", help="an `xlnet-jax export-hf` output (or any HF XLNet)")
    parser.add_argument("train", help="LABEL<TAB>TEXT lines to train on")
    parser.add_argument("eval", nargs="?", help="LABEL<TAB>TEXT lines to score at the end")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--out", help="save the fine-tuned model here")
    args = parser.parse_args(argv)
    texts, labels = read_task(args.train)
    model, _ = fine_tune(
        args.export_dir,
        texts,
        labels,
        steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
    )
    if args.eval:
        eval_texts, eval_labels = read_task(args.eval)
        score = accuracy(
            args.export_dir, model, eval_texts, eval_labels, max_length=args.max_length
        )
        print(f"accuracy on {args.eval}: {score:.4f} ({len(eval_texts)} examples)")
    if args.out:
        model.save_pretrained(args.out)


if __name__ == "__main__":
    main()
