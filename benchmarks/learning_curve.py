"""Loss curves of xlnet-jax and HuggingFace XLNetLMHeadModel, trained side by side.

Both start from the same weights (ours, exported with hf.py), read the same real-text
batches (StreamBatcher over a prepared corpus) and predict the same targets in the same
factorization orders: HF gets the perm_mask and one-hot target_mapping of the PLM sample our
train step draws (its key, fold_in(rng, step), recomputed outside the step). HF carries its
memory between steps, starting from zeros as ours does, and trains with the same AdamW (weight
decay off for the parameters optim.weight_decay_mask excludes, matched by HF name), the same
learning-rate schedule (optim.learning_rate_schedule itself, in a LambdaLR) and the same
global-norm clip. Dropout is 0, so the two runs differ only by float32 rounding, which makes
them drift apart slowly; the first step must agree to ~1e-5 (asserted to 1e-4), and every
step checks that both sides predict the same number of targets.

  xlnet-jax prepare --out demo/corpus --vocab_size 2000   # once (scripts/demo.sh)
  python benchmarks/learning_curve.py                      # tiny, 600 steps
  python benchmarks/learning_curve.py --steps 400 --mask_alpha 6 --num_predict 11

What to expect (2 cores, ~0.4 s per step pair): with tiny's ratio (a third of each row
predicted) both reach the corpus unigram entropy (printed last, 6.14 nats on demo/corpus) by
the end of warmup, plateau there until step ~350, then fall below it (~5.78 at step 600); the
two columns agree to ~2e-4. With the paper's ratio (a sixth predicted, second command) both
sit on the plateau (6.04-6.10) for all 400 steps and agree to ~5e-6.
"""

import argparse
import os
import sys

# torch's OpenMP threads wait passively (see train_throughput.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from harness import describe, machine, shape_config  # noqa: E402
from train_throughput import hf_model  # noqa: E402

from xlnet_jax.checkpoint import hf  # noqa: E402
from xlnet_jax.config import ModelConfig  # noqa: E402
from xlnet_jax.data.corpus import unigram_entropy  # noqa: E402
from xlnet_jax.data.manifest import load_manifest  # noqa: E402
from xlnet_jax.data.streams import StreamBatcher  # noqa: E402
from xlnet_jax.objective import plm
from xlnet_jax.training import optim, sharding, steps
from xlnet_jax.training.program import build_program  # noqa: E402

Batch = dict[str, np.ndarray]


class Ours:
    """Our train step, compiled as xlnet_jax/training/train.py does; a new batch each step."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.program = build_program(config, sharding.make_mesh(config))
        self.step_fn = self.program.compile_train_step()
        with self.program.activate():
            self.state = self.program.init_state()

    def step(self, batch: Batch) -> tuple[float, int]:
        """One training step; returns (loss, number of targets)."""
        self.state, metrics = self.step_fn(self.state, self.program.put_batch(batch))
        return float(metrics["loss"]), int(metrics["num_targets"])


def plm_masks(config: ml_collections.ConfigDict, rng_data: np.ndarray):
    """jitted (batch, step) -> perm_mask, target_pos, target_ids, target_weights, drawn with
    the PLM key our train_step derives from the state's rng at that step."""

    @jax.jit
    def masks(batch: Batch, step: int):
        sample = steps.sample_targets(batch, steps.step_keys(rng_data, step)[0], config)
        mask = plm.perm_mask(sample, batch["is_functional"], config.reuse_len)
        return mask, sample.target_pos, sample.target_ids, sample.target_weights

    return masks


class Reference:
    """transformers.XLNetLMHeadModel with our weights, optimiser, schedule and clip."""

    def __init__(self, config: ml_collections.ConfigDict, params: dict):
        model_config = ModelConfig.from_config(config)
        self.model = hf_model(config, params)
        # Our decay mask, exported like the weights: 1.0 where decay applies, per HF name.
        mask = jax.tree.map(
            lambda decays, p: np.full(p.shape, decays, np.float32),
            optim.weight_decay_mask(params),
            params,
        )
        decays = {k: bool(v.all()) for k, v in hf.params_to_hf(model_config, mask).items()}
        named = dict(self.model.named_parameters())  # lm_loss.weight is tied: not listed
        if named.keys() != decays.keys():
            raise RuntimeError(f"HF parameters {sorted(named.keys() ^ decays.keys())} unmatched")
        groups = [
            {
                "params": [p for k, p in named.items() if decays[k] == decay],
                "weight_decay": config.weight_decay if decay else 0.0,
            }
            for decay in (True, False)
        ]
        self.optimizer = torch.optim.AdamW(
            groups,
            lr=config.learning_rate,
            betas=(config.adam_b1, config.adam_b2),
            eps=config.adam_eps,
        )
        schedule = optim.learning_rate_schedule(config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: float(schedule(step)) / config.learning_rate
        )
        self.clip = config.clip_norm
        self.seq_len = config.seq_len
        self.mems = [
            torch.zeros(config.mem_len, config.batch_size, config.d_model)
            for _ in range(config.n_layer)
        ]

    def step(self, batch: Batch, masks) -> tuple[float, int]:
        """One training step on our PLM sample; returns (loss, number of targets)."""
        perm, target_pos, target_ids, weights = map(np.asarray, masks)
        labels = np.where(weights > 0, target_ids, -100)
        out = self.model(
            input_ids=torch.from_numpy(batch["input_ids"]).long(),
            token_type_ids=torch.from_numpy(batch["seg_ids"]).long(),
            perm_mask=torch.from_numpy(perm.astype(np.float32)),
            target_mapping=torch.from_numpy(np.eye(self.seq_len, dtype=np.float32)[target_pos]),
            mems=self.mems,
            use_mems=True,
            labels=torch.from_numpy(labels).long(),
        )
        out.loss.backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.mems = out.mems
        return float(out.loss.detach()), int((labels != -100).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="demo/corpus", help="output of xlnet-jax prepare")
    parser.add_argument("--steps", type=int, default=600, help="training steps (num_train_steps)")
    parser.add_argument("--every", type=int, default=50, help="steps per table row")
    tiny = shape_config("tiny")
    parser.add_argument("--mask_alpha", type=int, default=tiny.mask_alpha)
    parser.add_argument("--num_predict", type=int, default=tiny.num_predict)
    parser.add_argument("--learning_rate", type=float, default=tiny.learning_rate)
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.corpus, "manifest.json")):
        sys.exit(
            f"no prepared corpus in {args.corpus}: run "
            f"xlnet-jax prepare --out {args.corpus} --vocab_size 2000"
        )
    manifest = load_manifest(args.corpus)
    config = shape_config(
        "tiny",
        vocab_size=manifest.vocab_size,
        num_train_steps=args.steps,
        mask_alpha=args.mask_alpha,
        num_predict=args.num_predict,
        learning_rate=args.learning_rate,
    )
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    print(
        f"machine: {machine()}; torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(
        f"config: tiny, {describe(config)}; mask_alpha {config.mask_alpha}, lr "
        f"{config.learning_rate} (warmup {config.warmup_steps}, decay to step {args.steps})"
    )
    print(f"corpus: {args.corpus}, train split {manifest.splits['train']['tokens']:,} tokens\n")

    ours = Ours(config)
    theirs = Reference(config, jax.device_get(ours.state.params))
    masks = plm_masks(config, jax.device_get(ours.state.rng))
    batcher = StreamBatcher(
        args.corpus,
        "train",
        seq_len=config.seq_len,
        reuse_len=config.reuse_len,
        global_batch=config.batch_size,
        bi_data=False,
        seed=config.seed,
        next_sentence_prob=config.next_sentence_prob,
    )
    losses = []
    for step in range(args.steps):
        batch = batcher.batch(step)
        ours_out, hf_out = ours.step(batch), theirs.step(batch, masks(batch, step))
        if ours_out[1] != hf_out[1]:
            raise RuntimeError(f"step {step}: {ours_out[1]} targets in ours, {hf_out[1]} in HF")
        losses.append((ours_out[0], hf_out[0]))
        if step == 0:
            diff = abs(ours_out[0] - hf_out[0])
            print(f"first step: xlnet-jax {ours_out[0]:.6f}, HF {hf_out[0]:.6f}, |diff| {diff:.1e}")
            if diff > 1e-4:
                sys.exit("first-step losses differ by more than 1e-4: the inputs differ")
            print("\nlosses: means over the steps since the previous row\n")
            print("| step | xlnet-jax loss | HF loss | difference |")
            print("|---|---|---|---|")
        if (step + 1) % args.every == 0 or step + 1 == args.steps:
            mean_ours, mean_hf = np.mean(losses, axis=0)
            print(f"| {step + 1} | {mean_ours:.4f} | {mean_hf:.4f} | {mean_ours - mean_hf:+.1e} |")
            losses = []
    print(f"\ncorpus unigram entropy: {unigram_entropy(manifest, config.vocab_size):.4f} nats")


if __name__ == "__main__":
    main()
