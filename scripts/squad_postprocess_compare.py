"""SQuAD post-processing, the original's against the consistent one, on one fine-tuned
model's dev outputs: only the post-processing differs, not the model.

Runs `xlnet-jax finetune ARGS...` in this process, keeping the window outputs that its
final evaluation post-processes (the inputs of postprocess.predict, whichever rule the run
itself uses), then post-processes them both ways (squad_postprocess "original": run_squad's
write_predictions; "consistent": the window's last paragraph piece may end an answer, the
best non-empty text, a threshold search that skips ties) and scores each with
metric.evaluate. Prints both result dicts and their difference as one markdown table.
Needs a fresh --workdir: a finished run's rerun evaluates nothing.

    python scripts/squad_postprocess_compare.py --config configs/finetune/squad_cpu.py \\
        --task_name squad --data_dir demo/squad-dpkg-short --init_from demo/run \\
        --workdir demo/squad-short-compare
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from xlnet_jax import cli  # noqa: E402
from xlnet_jax.finetune.squad import metric, postprocess  # noqa: E402

KEYS = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "best_exact", "best_f1",
        "best_f1_thresh")  # fmt: skip


def main(argv: list[str]) -> int:
    captured = {}
    predict = postprocess.predict

    def recording(questions, windows, results, **kwargs):
        captured.update(questions=questions, windows=windows, results=results, kwargs=kwargs)
        return predict(questions, windows, results, **kwargs)

    postprocess.predict = recording  # the task calls it through the module
    code = cli.main(["finetune", *argv])
    if code:
        return code
    if not captured:
        sys.exit("no evaluation ran: give a fresh --workdir (a finished run evaluates nothing)")
    golds = {q.qid: q.answers for q in captured["questions"]}
    scores, texts = {}, {}
    for name in ("original", "consistent"):
        original = name == "original"
        kwargs = {**captured["kwargs"], "original": original}
        texts[name], null_odds, _ = predict(
            captured["questions"], captured["windows"], captured["results"], **kwargs
        )
        scores[name] = metric.evaluate(golds, texts[name], null_odds, original=original)
    changed = sum(texts["original"][q] != texts["consistent"][q] for q in golds)
    print(f"\n{len(golds)} dev questions; {changed} predictions differ\n")
    print("| post-processing | " + " | ".join(KEYS) + " |")
    print("|---|" + "---|" * len(KEYS))
    for name in ("original", "consistent"):
        print(f"| {name} | " + " | ".join(f"{scores[name][k]:.2f}" for k in KEYS) + " |")
    deltas = [scores["original"][k] - scores["consistent"][k] for k in KEYS]
    print("| original - consistent | " + " | ".join(f"{d:+.2f}" for d in deltas) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
