"""Our fine-tuning step against HF's on the same weights and batch, side by side, on the CPU.

Ours: `finetune/program.py`'s jitted train step (classification head, AdamW, clip, state
donated), as `xlnet-jax finetune` runs it. HF: `XLNetForSequenceClassification` in torch,
forward, cross-entropy, backward, global-norm clip, AdamW, loaded with the same weights.
Both in float32 without dropout (HF has one dropout rate, ours two), on one batch of
left-padded A <sep> B <sep> <cls> rows; steps alternate between the frameworks, and the
first step's loss must agree (to 1e-4) before anything is timed.

    python benchmarks/finetune_step.py [--shapes tiny,bench] [--iters 10]
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.harness import machine, ms, shape_config, time_calls  # noqa: E402
from xlnet_jax.checkpoint import hf  # noqa: E402
from xlnet_jax.finetune.compile import example_batch  # noqa: E402
from xlnet_jax.finetune.config import finetune_config  # noqa: E402
from xlnet_jax.finetune.program import build, model_config  # noqa: E402
from xlnet_jax.finetune.registry import get_task  # noqa: E402
from xlnet_jax.training import sharding  # noqa: E402

LABELS = ["a", "b", "c"]
SEQ = {"toy": 32, "tiny": 64, "bench": 128}
BATCH = {"toy": 4, "tiny": 32, "bench": 8}


def config_for(shape: str):
    """A fine-tuning config with the named shape's model (benchmarks/harness.SHAPES)."""
    model = shape_config(shape)
    c = finetune_config()
    for name in ("vocab_size", "d_model", "n_layer", "n_head", "d_head", "d_inner"):
        c[name] = model[name]
    c.seq_len, c.batch_size = SEQ[shape], BATCH[shape]
    c.dropout = c.dropatt = 0.0
    c.warmup_steps, c.num_train_steps, c.learning_rate = 0, 1000, 1e-4
    return c


def batch_for(config, task, seed: int = 0) -> dict[str, np.ndarray]:
    """Left-padded pair rows with random tokens and lengths, and random labels."""
    rng = np.random.default_rng(seed)
    batch = example_batch(task, config)
    for row in range(config.batch_size):
        real = int(rng.integers(config.seq_len // 2, config.seq_len + 1))
        split = config.seq_len - real + int(rng.integers(1, real - 2))
        batch["input_ids"][row, 0] = rng.integers(9, config.vocab_size, config.seq_len)
        batch["input_mask"][row, 0, : config.seq_len - real] = True
        batch["seg_ids"][row, 0] = 4
        batch["seg_ids"][row, 0, config.seq_len - real : split] = 0
        batch["seg_ids"][row, 0, split:-1] = 1
        batch["seg_ids"][row, 0, -1] = 2
    batch["label"] = rng.integers(0, len(LABELS), config.batch_size).astype(np.int32)
    return batch


def our_trainer(program, batch):
    """(step function, params) of our fine-tuning program on one batch."""
    holder = {"state": program.init_state()}
    params = jax.device_get(holder["state"].params)
    placed = program.put_batch(batch)

    def step():
        holder["state"], metrics = program.train_step(holder["state"], placed)
        return float(metrics["loss"])

    return step, params


def hf_trainer(config, params, batch):
    """(step function, first loss) of HF's classifier on our weights."""
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        hf.save_hf_head(tmp, model_config(config), params, "classification", LABELS)
        model = transformers.XLNetForSequenceClassification.from_pretrained(tmp)
    model.config.dropout = 0.0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, eps=1e-6,
                                  weight_decay=0.0)  # fmt: skip
    inputs = {
        "input_ids": torch.tensor(batch["input_ids"][:, 0], dtype=torch.long),
        "token_type_ids": torch.tensor(batch["seg_ids"][:, 0], dtype=torch.long),
        "attention_mask": torch.tensor(1 - batch["input_mask"][:, 0].astype(np.int64)),
        "labels": torch.tensor(batch["label"], dtype=torch.long),
    }

    def step():
        optimizer.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        return float(loss)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="tiny,bench")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    task = get_task("classification")
    rows = []
    for shape in args.shapes.split(","):
        config = config_for(shape)
        batch = batch_for(config, task)
        mesh = sharding.make_mesh(config, jax.devices()[:1])
        program = build(config, task, LABELS, mesh, batch)
        with program.activate():
            our_step, params = our_trainer(program, batch)
            first_ours = our_step()
            our_step()  # warm
        theirs = hf_trainer(config, params, batch)  # outside the mesh: HF export traces XLNetLM
        first_theirs = theirs()
        theirs()  # warm
        if abs(first_ours - first_theirs) > 1e-4:
            raise SystemExit(f"{shape}: first-step losses differ: {first_ours} vs {first_theirs}")
        times_ours, times_theirs = [], []
        for _ in range(args.iters):  # alternating, so the machine's load falls on both alike
            with program.activate():
                times_ours += time_calls(our_step, 1, warmup=0)
            times_theirs += time_calls(theirs, 1, warmup=0)
        tokens = config.batch_size * config.seq_len
        rows.append((shape, config, first_ours, first_theirs, times_ours, times_theirs, tokens))
    print(machine())
    print("\n| shape | layers x width | batch x seq | first loss (ours / HF) | "
          "ours ms/step | HF ms/step | ours / HF tokens/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for shape, c, loss_ours, loss_theirs, t_ours, t_theirs, tokens in rows:
        median = lambda t: sorted(t)[len(t) // 2]  # noqa: E731
        print(
            f"| {shape} | {c.n_layer} x {c.d_model} | {c.batch_size} x {c.seq_len} | "
            f"{loss_ours:.5f} / {loss_theirs:.5f} | {ms(t_ours)} | {ms(t_theirs)} | "
            f"{tokens / median(t_ours):,.0f} / {tokens / median(t_theirs):,.0f} |"
        )


if __name__ == "__main__":
    main()
