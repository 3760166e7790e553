"""Train-step throughput and MFU: xlnet-jax against HuggingFace XLNetLMHeadModel on this CPU.

Both sides run a full training step (two-stream forward with memory, loss over the targets,
backward, global-norm clip, AdamW) from identical weights (ours exported with hf.py) on the
same rows with the same masks: HF gets our perm_mask and a one-hot target_mapping of our
target_pos, and carries its mems between steps (use_mems=True in training mode). Our step
also samples the PLM targets and order on device; HF's masks are made outside its timing.
Steps of the two frameworks alternate, so both see the same machine load. MFU is the
analytic model FLOP rate (xlnet_jax/model/flops.py) over the float32 matmul peak measured here.

  python benchmarks/train_throughput.py                      # tiny,small,bench,base
  python benchmarks/train_throughput.py --shapes tiny --iters 10
"""

import argparse
import os
import statistics
import time

# torch's OpenMP threads wait passively: with the default spin-wait, torch steps on a shared
# 2-core machine stall for scheduler ticks (a toy step took 65-1150 ms instead of 23 ms).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from harness import (  # noqa: E402
    SHAPES,
    describe,
    machine,
    make_trainer,
    matmul_peak_gflops,
    ms,
    shape_config,
)

from xlnet_jax.checkpoint import hf  # noqa: E402
from xlnet_jax.config import ModelConfig  # noqa: E402
from xlnet_jax.model import flops
from xlnet_jax.objective import plm
from xlnet_jax.training import steps


def hf_model(config, params: dict) -> transformers.XLNetLMHeadModel:
    """HF's XLNetLMHeadModel holding our params (exported with hf.py), in training mode."""
    model_config = ModelConfig.from_config(config)
    model = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**hf.config_to_hf(model_config)))
    state = {
        k: torch.from_numpy(v.copy()) for k, v in hf.params_to_hf(model_config, params).items()
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"lm_loss.weight"}:
        raise RuntimeError(f"HF weights: missing {missing}, unexpected {unexpected}")
    return model.train()


class HFTrainer:
    """transformers.XLNetLMHeadModel with AdamW, fed the masks our step samples.

    On CPU it runs float32 eager (this script). On an accelerator (accelerator_throughput.py)
    it can run under autocast (`amp_dtype`), with fused AdamW, and through torch.compile.
    """

    def __init__(
        self,
        config,
        params,
        batch: dict,
        rng_data: np.ndarray,
        num_masks: int,
        device: str = "cpu",
        amp_dtype: torch.dtype | None = None,
        compiled: bool = False,
    ):
        self.device, self.amp_dtype = torch.device(device), amp_dtype
        self.model = hf_model(config, params).to(self.device)
        self.forward = torch.compile(self.model) if compiled else self.model
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.learning_rate,
            betas=(config.adam_b1, config.adam_b2),
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
            fused=self.device.type == "cuda" or None,
        )
        self.clip = config.clip_norm
        self.ids = torch.from_numpy(batch["input_ids"]).long().to(self.device)
        self.seg = torch.from_numpy(batch["seg_ids"]).long().to(self.device)
        self.masks = [
            tuple(t.to(self.device) for t in self._masks(config, batch, rng_data, step))
            for step in range(num_masks)
        ]
        self.mems, self.calls = None, 0

    @staticmethod
    def _masks(config, batch: dict, rng_data: np.ndarray, step: int):
        """perm_mask, one-hot target_mapping and labels as our train_step samples them."""
        sample = steps.sample_targets(batch, steps.step_keys(rng_data, step)[0], config)
        perm = plm.perm_mask(sample, batch["is_functional"], config.reuse_len)
        target_pos = np.asarray(sample.target_pos)
        mapping = np.eye(config.seq_len, dtype=np.float32)[target_pos]
        labels = np.where(
            np.asarray(sample.target_weights) > 0, np.asarray(sample.target_ids), -100
        )
        return (
            torch.from_numpy(np.asarray(perm, np.float32)),
            torch.from_numpy(mapping),
            torch.from_numpy(labels).long(),
        )

    def run(self) -> float:
        """One training step; returns the loss."""
        perm, mapping, labels = self.masks[self.calls % len(self.masks)]
        self.calls += 1
        with torch.autocast(
            self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
        ):
            out = self.forward(
                input_ids=self.ids,
                token_type_ids=self.seg,
                perm_mask=perm,
                target_mapping=mapping,
                mems=self.mems,
                use_mems=True,
                labels=labels,
            )
        out.loss.backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.mems = out.mems
        return float(out.loss.detach())


def alternate(ours, theirs, iters: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Wall seconds of `iters` calls of each, alternating, after `warmup` calls of each."""
    for _ in range(warmup):
        ours(), theirs()
    times = ([], [])
    for _ in range(iters):
        for fn, out in ((ours, times[0]), (theirs, times[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="tiny,small,bench,base", help=f"from {sorted(SHAPES)}")
    parser.add_argument("--iters", type=int, default=10, help="timed steps per framework")
    parser.add_argument("--peak_n", type=int, default=2048, help="size of the peak matmul")
    args = parser.parse_args()
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    peak = matmul_peak_gflops(args.peak_n)
    wait = os.environ["OMP_WAIT_POLICY"]
    print(f"machine: {machine()}; torch {torch.__version__} ({threads} threads, OMP {wait})")
    print(f"float32 matmul peak ({args.peak_n}^3 jnp.dot, median of 10): {peak:.0f} GFLOP/s")
    print("step time: median (min-max) ms of alternating steps; float32, no dropout\n")
    print("| shape | framework | step ms | tokens/s | model GFLOP/s | MFU | speedup |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for name in args.shapes.split(","):
        config = shape_config(name)
        ours = make_trainer(config)
        params = jax.device_get(ours.state.params)
        theirs = HFTrainer(config, params, ours.host_batch, ours.state.rng, args.iters + 2)
        ours_t, hf_t = alternate(ours.run, theirs.run, args.iters)
        step_flops = flops.train_flops_per_step(config)
        tokens = config.batch_size * config.seq_len
        for label, times in (("xlnet-jax", ours_t), ("HF torch", hf_t)):
            median = statistics.median(times)
            speedup = statistics.median(hf_t) / median
            print(
                f"| {name} | {label} | {ms(times)} | {tokens / median:,.0f} | "
                f"{step_flops / median / 1e9:.1f} | {100 * step_flops / median / 1e9 / peak:.1f}% "
                f"| {speedup:.2f}x |"
            )
        notes.append(
            f"{name}: {describe(config)}; {step_flops / 1e9:.1f} GFLOP/step; "
            f"our compile {ours.compile_s:.1f} s; transfer_guard('disallow') around every step"
        )
    print()
    print("\n".join(notes))
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
